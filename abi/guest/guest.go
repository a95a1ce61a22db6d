// Package guest is the Go guest SDK for volhost WebAssembly modules: a
// release policy or CSI adapter is a plain Go function registered from init.
//
//	func main() {}
//	func init() {
//		guest.HandleRelease(func(req *abi.PolicyRequest) (*abi.PolicyResponse, error) { ... })
//	}
//
// or, allocating nothing per call (the request decoded in place, the
// response reused; valid only until the handler returns):
//
//	guest.HandleReleaseInto(func(req *abi.PolicyRequest, resp *abi.PolicyResponse) error { ... })
//
// Built with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, the
// package provides every export of ABI v1 (exports_wasip1.go): it owns the
// request buffer, decodes the request with the hand-written codec, runs the
// handler inside recover (a panic becomes a response whose Error is
// "panic: ...", not a trap), encodes the response into its own buffer and
// yields to the Go scheduler (runtime.Gosched) before returning after every
// 16th call, and after every call while the guest allocates fast (yield.go):
// without yields a guest allocating large objects runs out of memory
// (TestGuestMemoryBoundedLargeGarbage), and a yield after every call costs more than a
// small decision.
//
// The optional export of ABI 1.1, volhost_confirm_fence, is in package
// abi/guest/confirmfence: a module that imports it has the export.
//
// Off wasm the package still compiles (Log is a no-op) and the dispatch
// layer, Handlers, is plain bytes in, bytes out, so it and every handler are
// testable with go test on the build machine.
package guest

import (
	"errors"
	"fmt"

	"github.com/volhost/volhost/abi"
)

// ReleaseFunc judges the claims of one volume (kind release-policy). req
// and its Claims, Allocs and Nodes slices belong to the SDK and are reused
// by the next call (the decode allocates no slices then): a handler that
// keeps any of them past its return must copy them. Strings may be kept.
type ReleaseFunc func(req *abi.PolicyRequest) (*abi.PolicyResponse, error)

// ReleaseIntoFunc is a ReleaseFunc that fills in a response the SDK owns
// instead of returning a new one (HandleReleaseInto). resp arrives empty,
// its Decisions slice with the capacity of earlier calls, so appending to
// it allocates only when a request has more claims than any before. req's
// strings alias the SDK's request buffer, which the host overwrites with
// the next request: req, resp and every string of req are valid only until
// the handler returns (strings copied with strings.Clone may be kept).
// Setting resp.Error, or returning an error, fails the call.
type ReleaseIntoFunc func(req *abi.PolicyRequest, resp *abi.PolicyResponse) error

// ConfigureFunc receives the manifest's config block once per instance and
// returns the module's own version string.
type ConfigureFunc func(cfg map[string]string) (version string, err error)

// AdaptFunc maps a claim onto a driver's CSI request fields (kind csi-adapter).
type AdaptFunc func(req *abi.AdapterRequest) (*abi.AdapterResponse, error)

// RawFunc handles an export's encoded request: it appends the encoded
// response to out and returns it. It is for modules that bring their own
// codec, and for the host's tests, which need a module that answers with
// bytes that do not decode. The SDK still recovers its panics and encodes
// its error as the response's Error.
type RawFunc func(in, out []byte) ([]byte, error)

// ClassifyFunc says what a driver's error means (kind csi-adapter).
type ClassifyFunc func(req *abi.ClassifyRequest) (*abi.ClassifyResponse, error)

// ConfirmFenceFunc says whether a node the host lost (heartbeats stopped,
// not fenced) is known to be off (kind csi-adapter, ABI 1.1). It is
// registered with confirmfence.Handle, whose import adds the export.
type ConfirmFenceFunc func(req *abi.FenceRequest) (*abi.FenceResponse, error)

// Handlers holds a module's handlers and turns encoded requests into encoded
// responses. The zero value has none: a decision export without a handler
// answers with Error set, configure without a handler succeeds with an empty
// version (a module need not take config).
type Handlers struct {
	Configure ConfigureFunc
	Release   ReleaseFunc
	Adapt     AdaptFunc
	Classify  ClassifyFunc
	// ConfirmFence serves volhost_confirm_fence (ABI 1.1), an export only
	// a module importing abi/guest/confirmfence has.
	ConfirmFence ConfirmFenceFunc
	// AdaptSteps is sent in the configure response (see AdaptSteps).
	AdaptSteps []string
	// ReleaseRaw, when set, serves volhost_decide_release instead of Release.
	ReleaseRaw RawFunc
	// ReleaseInto, when set (and ReleaseRaw is not), serves
	// volhost_decide_release instead of Release, with no allocation per
	// call in steady state (see ReleaseIntoFunc).
	ReleaseInto ReleaseIntoFunc

	moduleName string
	// releaseReq is decoded into on every release call (UnmarshalReusing,
	// or UnmarshalBorrowing for ReleaseInto).
	releaseReq abi.PolicyRequest
	// releaseResp is ReleaseInto's response, reused by every call.
	releaseResp abi.PolicyResponse
}

// registered are the handlers the wasm exports serve.
var registered Handlers

// HandleConfigure registers the configure handler. Call it from init.
func HandleConfigure(f ConfigureFunc) { registered.Configure = f }

// HandleRelease registers the release-policy handler. Call it from init.
func HandleRelease(f ReleaseFunc) { registered.Release = f }

// HandleReleaseRaw registers a release-policy handler that does its own
// decoding and encoding; it takes precedence over HandleRelease.
func HandleReleaseRaw(f RawFunc) { registered.ReleaseRaw = f }

// HandleReleaseInto registers a release-policy handler that fills in a
// response the SDK reuses across calls; it takes precedence over
// HandleRelease. A Go guest that allocates nothing per call runs no GC
// work on the call path (ABI.md section 12), which is most of what a
// small decision costs it. Call it from init.
func HandleReleaseInto(f ReleaseIntoFunc) { registered.ReleaseInto = f }

// HandleAdapt registers the CSI adapter's request mapping. Call it from init.
func HandleAdapt(f AdaptFunc) { registered.Adapt = f }

// HandleClassify registers the CSI adapter's error classification. Call it from init.
func HandleClassify(f ClassifyFunc) { registered.Classify = f }

// AdaptSteps declares the only steps (abi.AdapterSteps) whose CSI requests
// the adapt handler changes. The host then builds every other step's request
// itself, as the CSI spec's default, and skips the call: one Wasm call
// fewer per release for each step left out. Without it the host asks the
// module for every step. Call it from init.
func AdaptSteps(steps ...string) { registered.AdaptSteps = steps }

// ModuleName is the name the host gave this module in its configure call
// (the manifest's file name), or "" before configure.
func ModuleName() string { return registered.moduleName }

// errNoHandler is the response error of a decision export nobody registered.
var errNoHandler = errors.New("no handler registered for this export")

// protect runs f, turning a panic into an error so one bad request costs a
// response with Error set, not a trapped (and discarded) instance.
func protect(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// DispatchConfigure decodes a ConfigureRequest from in, runs the configure
// handler and appends the encoded ConfigureResponse to out.
func (h *Handlers) DispatchConfigure(in, out []byte) []byte {
	resp := abi.ConfigureResponse{AdaptSteps: h.AdaptSteps}
	err := protect(func() error {
		var req abi.ConfigureRequest
		if err := req.Unmarshal(in); err != nil {
			return err
		}
		h.moduleName = req.ModuleName
		if h.Configure == nil {
			return nil
		}
		v, err := h.Configure(req.Config)
		resp.Version = v
		return err
	})
	if err != nil {
		resp.Error = err.Error()
	}
	return resp.MarshalAppend(out)
}

// DispatchRelease decodes a PolicyRequest from in, runs the release handler
// and appends the encoded PolicyResponse to out.
func (h *Handlers) DispatchRelease(in, out []byte) []byte {
	if h.ReleaseRaw != nil {
		res := out
		err := protect(func() (err error) {
			res, err = h.ReleaseRaw(in, out)
			return err
		})
		if err != nil {
			return (&abi.PolicyResponse{Error: err.Error()}).MarshalAppend(out)
		}
		return res
	}
	if h.ReleaseInto != nil {
		return h.dispatchReleaseInto(in, out)
	}
	return h.dispatchRelease(in, out)
}

// dispatchReleaseInto is dispatch for ReleaseInto: the request decoded in
// place (its strings alias in) into the reused h.releaseReq, the answer
// written into the reused h.releaseResp. Nothing here allocates in steady
// state; only a failure does, building its message.
func (h *Handlers) dispatchReleaseInto(in, out []byte) (res []byte) {
	failed := func(msg string) []byte { return (&abi.PolicyResponse{Error: msg}).MarshalAppend(out) }
	defer func() {
		if r := recover(); r != nil {
			res = failed(fmt.Sprintf("panic: %v", r))
		}
	}()
	req, resp := &h.releaseReq, &h.releaseResp
	if err := req.UnmarshalBorrowing(in); err != nil {
		return failed(err.Error())
	}
	// The last call's decisions past the new length are left as they were:
	// their strings alias the request buffer, alive anyway. Field by field:
	// a composite literal is a memory.fill and a memory.copy in a Go guest,
	// each a call out of its code (TestGuestCallWork counts them).
	resp.Decisions, resp.Error = resp.Decisions[:0], ""
	if err := h.ReleaseInto(req, resp); err != nil {
		return failed(err.Error())
	}
	if resp.Error != "" {
		return failed(resp.Error)
	}
	return resp.MarshalAppend(out)
}

// dispatchRelease is dispatch for the release handler, decoding into the
// reused h.releaseReq instead of a new request per call.
func (h *Handlers) dispatchRelease(in, out []byte) (res []byte) {
	failed := func(msg string) []byte { return (&abi.PolicyResponse{Error: msg}).MarshalAppend(out) }
	defer func() {
		if r := recover(); r != nil {
			res = failed(fmt.Sprintf("panic: %v", r))
		}
	}()
	if h.Release == nil {
		return failed(errNoHandler.Error())
	}
	req := &h.releaseReq
	if err := req.UnmarshalReusing(in); err != nil {
		return failed(err.Error())
	}
	resp, err := h.Release(req)
	switch {
	case err != nil:
		return failed(err.Error())
	case resp == nil:
		return failed("handler returned no response")
	}
	return resp.MarshalAppend(out)
}

// DispatchAdapt decodes an AdapterRequest from in, runs the adapt handler and
// appends the encoded AdapterResponse to out.
func (h *Handlers) DispatchAdapt(in, out []byte) []byte {
	return dispatch(in, out, h.Adapt, func(msg string) *abi.AdapterResponse {
		return &abi.AdapterResponse{Error: msg}
	})
}

// DispatchClassify decodes a ClassifyRequest from in, runs the classify
// handler and appends the encoded ClassifyResponse to out.
func (h *Handlers) DispatchClassify(in, out []byte) []byte {
	return dispatch(in, out, h.Classify, func(msg string) *abi.ClassifyResponse {
		return &abi.ClassifyResponse{Error: msg}
	})
}

// DispatchConfirmFence decodes a FenceRequest from in, runs the confirm
// fence handler and appends the encoded FenceResponse to out.
func (h *Handlers) DispatchConfirmFence(in, out []byte) []byte {
	return dispatch(in, out, h.ConfirmFence, func(msg string) *abi.FenceResponse {
		return &abi.FenceResponse{Error: msg}
	})
}

// RegisterConfirmFence registers the handler of volhost_confirm_fence.
// Modules call confirmfence.Handle, which also links the export: without
// the export the host never asks, so a handler registered here alone
// would never run.
func RegisterConfirmFence(f ConfirmFenceFunc) { registered.ConfirmFence = f }

// dispatch decodes a request from in, runs handle and appends the encoded
// response to out. Any failure (no handler, a malformed request, a handler
// error or panic, a nil response) becomes a response whose Error says so,
// built by failed. It recovers panics itself rather than through protect:
// in a wasm guest every call layer costs (ABI.md section 12).
func dispatch[Req any, PReq interface {
	*Req
	Unmarshal([]byte) error
}, Resp interface {
	comparable
	MarshalAppend([]byte) []byte
}](in, out []byte, handle func(PReq) (Resp, error), failed func(string) Resp) (res []byte) {
	defer func() {
		if r := recover(); r != nil {
			res = failed(fmt.Sprintf("panic: %v", r)).MarshalAppend(out)
		}
	}()
	if handle == nil {
		return failed(errNoHandler.Error()).MarshalAppend(out)
	}
	req := PReq(new(Req))
	if err := req.Unmarshal(in); err != nil {
		return failed(err.Error()).MarshalAppend(out)
	}
	resp, err := handle(req)
	var none Resp
	switch {
	case err != nil:
		resp = failed(err.Error())
	case resp == none:
		resp = failed("handler returned no response")
	}
	return resp.MarshalAppend(out)
}

// lengthError describes a request length that does not fit the buffer.
func lengthError(n int32, bufLen int) error {
	return fmt.Errorf("request length %d does not fit the %d-byte buffer from volhost_buffer", n, bufLen)
}

// errorResponse appends to out the encoded response type of export with
// Error set to err, for failures found before any handler runs.
func errorResponse(export string, err error, out []byte) []byte {
	msg := err.Error()
	switch export {
	case abi.ExportConfigure:
		return (&abi.ConfigureResponse{Error: msg}).MarshalAppend(out)
	case abi.ExportDecideRelease:
		return (&abi.PolicyResponse{Error: msg}).MarshalAppend(out)
	case abi.ExportAdaptRequest:
		return (&abi.AdapterResponse{Error: msg}).MarshalAppend(out)
	case abi.ExportClassifyError:
		return (&abi.ClassifyResponse{Error: msg}).MarshalAppend(out)
	case abi.ExportConfirmFence:
		return (&abi.FenceResponse{Error: msg}).MarshalAppend(out)
	}
	return out
}

// Logf formats a line and logs it at level (abi.LogTrace..abi.LogError).
func Logf(level int32, format string, args ...any) {
	if !Enabled(level) {
		return
	}
	Log(level, fmt.Sprintf(format, args...))
}
