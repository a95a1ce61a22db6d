//go:build wasip1

//lint:file-ignore U1000 the exports are reached by the host through go:wasmexport, which staticcheck does not follow.

package guest

import (
	"runtime"
	"unsafe"

	"github.com/volhost/volhost/abi"
)

// Memory ownership (ABI.md "Memory"): the guest owns two buffers. The host
// asks volhost_buffer(n) for room for a request, writes it there and calls a
// decision export with its length; the export encodes the response into out
// and returns its address and length packed by abi.PackResult. Both stay
// valid until the next call into this instance, which is all the host needs
// to copy the response out. Go's GC does not move heap objects, so the
// addresses are stable while the package variables hold the slices.
var (
	in  []byte
	out []byte
)

//go:wasmexport volhost_abi_version
func exportVersion() int32 { return abi.Version }

//go:wasmexport volhost_buffer
func exportBuffer(size int32) int32 {
	if size < 0 || size > abi.MaxMessageSize {
		return 0 // no buffer: the host treats address 0 as an ABI violation
	}
	if cap(in) < int(size) || cap(in) == 0 {
		// Grow geometrically so slowly growing requests do not reallocate
		// every call; the old buffer is garbage once the host has written
		// the new request here.
		in = make([]byte, max(int(size), 2*cap(in), 1024))
	}
	in = in[:cap(in)]
	return int32(uintptr(unsafe.Pointer(&in[0])))
}

// request returns the n request bytes the host wrote into in; ok is false
// when n does not fit the buffer (the host broke the protocol).
func request(n int32) (b []byte, ok bool) {
	if n < 0 || int(n) > len(in) {
		return nil, false
	}
	return in[:n], true
}

// yield decides after each call whether the export yields (yield.go).
var yield yieldRule

func init() { armGCProbe() }

// result packs out for the host and, by the rule above, lets the scheduler run.
func result() int64 {
	if yield.after(gcCycles.Load()) {
		runtime.Gosched()
	}
	if len(out) == 0 {
		return int64(abi.PackResult(0, 0))
	}
	return int64(abi.PackResult(uint32(uintptr(unsafe.Pointer(&out[0]))), uint32(len(out))))
}

//go:wasmexport volhost_configure
func exportConfigure(n int32) int64 {
	if req, ok := request(n); ok {
		out = registered.DispatchConfigure(req, out[:0])
	} else {
		out = errorResponse(abi.ExportConfigure, lengthError(n, len(in)), out[:0])
	}
	return result()
}

//go:wasmexport volhost_decide_release
func exportDecideRelease(n int32) int64 {
	if req, ok := request(n); ok {
		out = registered.DispatchRelease(req, out[:0])
	} else {
		out = errorResponse(abi.ExportDecideRelease, lengthError(n, len(in)), out[:0])
	}
	return result()
}

//go:wasmexport volhost_adapt_request
func exportAdaptRequest(n int32) int64 {
	if req, ok := request(n); ok {
		out = registered.DispatchAdapt(req, out[:0])
	} else {
		out = errorResponse(abi.ExportAdaptRequest, lengthError(n, len(in)), out[:0])
	}
	return result()
}

//go:wasmexport volhost_classify_error
func exportClassifyError(n int32) int64 {
	if req, ok := request(n); ok {
		out = registered.DispatchClassify(req, out[:0])
	} else {
		out = errorResponse(abi.ExportClassifyError, lengthError(n, len(in)), out[:0])
	}
	return result()
}

// ServeExport serves an optional export (ABI.md section 10) that lives in
// its own package, so that only a module importing that package exports
// it (abi/guest/confirmfence): it runs dispatch on the registered handlers
// over the request of length n in the SDK's buffer, like the exports above.
func ServeExport(n int32, export string, dispatch func(h *Handlers, in, out []byte) []byte) int64 {
	if req, ok := request(n); ok {
		out = dispatch(&registered, req, out[:0])
	} else {
		out = errorResponse(export, lengthError(n, len(in)), out[:0])
	}
	return result()
}

//go:wasmimport volhost log
func hostLog(level int32, ptr unsafe.Pointer, n int32)

//go:wasmimport volhost log_level
func hostLogLevel() int32

// Enabled reports whether the host records lines at level.
func Enabled(level int32) bool { return level >= hostLogLevel() }

// Log writes msg at level (abi.LogTrace..abi.LogError) through the host's
// logger for this module, which adds the module's name and version.
func Log(level int32, msg string) {
	if msg == "" || !Enabled(level) {
		return
	}
	hostLog(level, unsafe.Pointer(unsafe.StringData(msg)), int32(len(msg)))
}
