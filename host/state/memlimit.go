package state

import (
	"math"
	"runtime/debug"
	"sync"
)

// A restore builds a whole second state beside the one it replaces, so
// for its duration the live heap is the old state plus the new one. Under
// a soft memory limit near the size of one state (README "Production
// agent": GOMEMLIMIT=1800MiB for a 2 GiB budget at 1,000,000 volumes) the
// collector then runs back to back while the new state grows towards the
// limit, and a 1,000,000-volume restore slowed by half (BenchmarkScale
// under GOMEMLIMIT; BENCHMARKS.md "Under a soft memory limit"). No limit can hold while two states are live, so a
// restore lifts it and puts it back when it ends; the collector then
// brings the heap under it again. Without a limit this changes nothing.
//
// The limit is process-wide and restores may overlap (one store per test,
// or a snapshot restore in one server while another starts): the first
// restore to begin saves the limit in effect, the last to end puts it back.
var memoryLimitLift struct {
	sync.Mutex
	restores int
	saved    int64
}

// liftMemoryLimit lifts the Go runtime's soft memory limit, if any, until
// the function it returns is called (once).
func liftMemoryLimit() (restore func()) {
	l := &memoryLimitLift
	l.Lock()
	defer l.Unlock()
	if l.restores == 0 {
		l.saved = debug.SetMemoryLimit(math.MaxInt64)
	}
	l.restores++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.Lock()
			defer l.Unlock()
			l.restores--
			if l.restores == 0 {
				debug.SetMemoryLimit(l.saved)
			}
		})
	}
}

// SetMemoryLimit sets the runtime's soft memory limit, or, while a restore
// lifts it, the limit that restore puts back when it ends: a limit set
// during a restore (the agent's, host/agent memlimit.go, follows the live
// heap) must neither end the lift early nor be lost when it ends.
func SetMemoryLimit(limit int64) {
	l := &memoryLimitLift
	l.Lock()
	defer l.Unlock()
	if l.restores > 0 {
		l.saved = limit
		return
	}
	debug.SetMemoryLimit(limit)
}
