package guest

import (
	"runtime"
	"sync/atomic"
)

// Yielding (ABI.md section 11). A c-shared Go guest runs its garbage
// collector's background work (mark workers, sweeper) and other goroutines
// only when an export yields (runtime.Gosched), and without that a guest
// allocating large objects runs out of memory. But a yield costs about 40
// guest function calls (BenchmarkGuestCost), more than a
// small decision itself, so the exports yield
//   - after every call while the guest allocates fast: for the busyWindow
//     calls after each completed GC cycle, and
//   - after every yieldEvery-th call otherwise.
//
// Measured (ABI.md section 12): 256 KiB of garbage per call needs a yield
// after nearly every call (every 2nd or 4th call already lets memory creep,
// every 16th runs out of memory within 2,000 calls); such a guest completes
// a GC cycle every ~15 calls, so it stays in the busy window. Up to 32 KiB
// per call (small objects) never needed a yield at all, and a guest making
// a few KiB per call (the default policy) completes a cycle every ~1,300
// calls and mostly yields every 16th call.
const (
	yieldEvery = 16
	busyWindow = 64
)

// yieldRule is the rule above over the calls served so far.
type yieldRule struct {
	calls  uint64 // calls served
	lastGC uint64 // calls when a completed GC cycle was last seen
	seenGC uint64 // the GC cycle count then
}

// after records a call, given the completed GC cycles so far (gcCycles),
// and reports whether the export yields before returning.
func (y *yieldRule) after(cycles uint64) bool {
	y.calls++
	if cycles != y.seenGC {
		y.seenGC, y.lastGC = cycles, y.calls
	}
	return y.calls-y.lastGC < busyWindow || y.calls%yieldEvery == 0
}

// gcCycles counts the GC cycles the probe has seen complete.
var gcCycles atomic.Uint64

// gcProbe is an object nothing references: its cleanup runs once a GC cycle
// has found it unreachable, which counts the cycle and arms a new probe. A
// cycle count read this way costs one atomic load per call, where
// runtime/metrics costs about as much as the yield itself. (A weak pointer
// cannot serve: reading it during marking keeps its object alive.) In a
// guest the cleanup runs at the next yield, which the every-16th-call rule
// guarantees.
type gcProbe struct{ _ *byte } // has a pointer, so never a tiny allocation

// armGCProbe starts counting; the wasm exports call it once from init.
func armGCProbe() {
	runtime.AddCleanup(new(gcProbe), func(struct{}) {
		gcCycles.Add(1)
		armGCProbe()
	}, struct{}{})
}
