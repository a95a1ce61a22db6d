package main

import (
	"fmt"
	"runtime"
	"sort"
	"strings"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
	"github.com/volhost/volhost/abi/guest"
)

// version is reported to the host in the configure response.
const version = "1.0.0"

// Modes, each one fault the host must isolate (the module runtime's
// sandbox: a module's fault never reaches the host).
const (
	ModeOK        = "ok"        // default-policy decisions: the healthy baseline
	ModePanic     = "panic"     // the handler panics; the SDK answers Error "panic: ..."
	ModeError     = "error"     // the handler returns an error; the SDK answers Error
	ModeTrap      = "trap"      // an unrecovered panic on another goroutine: a wasm trap
	ModeSpin      = "spin"      // loops forever: only the host's call timeout ends it
	ModeOOM       = "oom"       // allocates without bound until the memory cap traps it
	ModeMalformed = "malformed" // answers bytes that do not decode as a PolicyResponse
	ModeStranger  = "stranger"  // adds a decision for an alloc ID not in the request
	ModeAllocate  = "allocate"  // healthy decisions, but allocates garbage every call
)

var modes = []string{ModeOK, ModePanic, ModeError, ModeTrap, ModeSpin, ModeOOM, ModeMalformed, ModeStranger, ModeAllocate}

// ContextKey in a request's volume context overrides the configured mode for
// that request, so one instance can show every fault.
const ContextKey = "fault.mode"

// settings is what configure accepted.
type settings struct {
	mode string
	// spare is a namespace whose requests are always answered like ModeOK
	// (unless the request names a mode itself): the host's load-time
	// self-test then passes and the fault shows on real calls.
	spare string
	// allocKiB is the garbage ModeAllocate makes per call.
	allocKiB int
}

var cfg = settings{mode: ModeOK, spare: "volhost-selftest", allocKiB: 256}

func validMode(m string) bool {
	for _, x := range modes {
		if x == m {
			return true
		}
	}
	return false
}

// configure reads mode, spare_namespace and alloc_kib; anything else is refused.
func configure(c map[string]string) (string, error) {
	s := settings{mode: ModeOK, spare: "volhost-selftest", allocKiB: 256}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := c[k]
		switch k {
		case "mode":
			if !validMode(v) {
				return version, fmt.Errorf("config mode = %q: want one of %s", v, strings.Join(modes, ", "))
			}
			s.mode = v
		case "spare_namespace":
			s.spare = v
		case "alloc_kib":
			var n int
			if _, err := fmt.Sscanf(v, "%d", &n); err != nil || n <= 0 || n > 64<<10 {
				return version, fmt.Errorf("config alloc_kib = %q: want an integer in 1..65536", v)
			}
			s.allocKiB = n
		default:
			return version, fmt.Errorf("unknown config key %q (known: mode, spare_namespace, alloc_kib)", k)
		}
	}
	cfg = s
	// Logging here keeps the volhost.log import in the module, so the host
	// can test that guest log lines reach its logger.
	guest.Logf(abi.LogInfo, "fault-policy configured: mode=%s spare_namespace=%s", s.mode, s.spare)
	return version, nil
}

// modeFor picks the mode for one request.
func modeFor(req *abi.PolicyRequest) string {
	if m, ok := req.Volume.Context[ContextKey]; ok {
		return m
	}
	if cfg.spare != "" && req.Volume.Namespace == cfg.spare {
		return ModeOK
	}
	return cfg.mode
}

// sink keeps allocations reachable so the compiler cannot drop them.
var sink [][]byte

// garbage is written by ModeAllocate and dropped on the next call.
var garbage []byte

// spin does not return: the full-period 64-bit LCG returns to 0 only after
// 2^64 steps, and the loop condition reads it, so no compiler drops the loop.
func spin() {
	for n := uint64(1); n != 0; n = n*6364136223846793005 + 1442695040888963407 {
	}
}

// decideRaw serves volhost_decide_release with the SDK's raw hook, because
// ModeMalformed must answer bytes no encoder would produce.
func decideRaw(in, out []byte) ([]byte, error) {
	var req abi.PolicyRequest
	if err := req.Unmarshal(in); err != nil {
		return out, err
	}
	mode := modeFor(&req)
	switch mode {
	case ModeOK:
	case ModePanic:
		panic("fault-policy: deliberate panic")
	case ModeError:
		return out, fmt.Errorf("fault-policy: deliberate error")
	case ModeTrap:
		// A panic on another goroutine escapes the SDK's recover: the Go
		// runtime aborts, which the host sees as a trap during this call
		// (the SDK yields to the scheduler before returning).
		done := make(chan struct{})
		go func() {
			defer close(done)
			panic("fault-policy: deliberate unrecovered panic")
		}()
		<-done
	case ModeSpin:
		// Said first, so a test knows the call is running before it
		// stops it (plugins TestCallerCancelStopsCall).
		guest.Log(abi.LogWarn, "fault-policy: spinning")
		spin()
	case ModeOOM:
		for {
			sink = append(sink, make([]byte, 1<<20))
		}
	case ModeMalformed:
		// Field 1 with a length running past the end: not a PolicyResponse.
		return append(out, 0x0a, 0x7f, 0x01), nil
	case ModeAllocate:
		garbage = make([]byte, cfg.allocKiB<<10)
		for i := 0; i < len(garbage); i += 4096 {
			garbage[i] = byte(i)
		}
		runtime.KeepAlive(garbage)
	case ModeStranger:
		resp := defaultpolicy.Decide(&req)
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: "fault-policy-stranger", Action: abi.ActionRelease, Reason: "not in the request"})
		return resp.MarshalAppend(out), nil
	default:
		return out, fmt.Errorf("fault-policy: unknown mode %q", mode)
	}
	return defaultpolicy.Decide(&req).MarshalAppend(out), nil
}
