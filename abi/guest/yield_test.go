package guest

import (
	"runtime"
	"testing"
	"time"
)

// TestYieldRule replays call sequences through the rule: every call yields
// for busyWindow calls after a GC cycle is seen (and after start), every
// yieldEvery-th call otherwise.
func TestYieldRule(t *testing.T) {
	tests := []struct {
		name    string
		calls   int
		gcAt    []int // calls after which the probe has seen one more cycle
		yields  int
		noYield []int // calls that must not yield
		yield   []int // calls that must yield
	}{
		{"start is busy", busyWindow - 1, nil, busyWindow - 1, nil, []int{1, 2, busyWindow - 1}},
		// Calls 1..63 (busy), then 64, 80, ..., 992.
		{"quiet: every yieldEvery-th", 1000, nil, 63 + 59,
			[]int{65, 66, 999}, []int{64, 80, 992}},
		{"a GC cycle opens a busy window", 1000, []int{500}, 0,
			[]int{499, 500 + busyWindow}, []int{500, 501, 500 + busyWindow - 1}},
		{"frequent cycles keep it busy", 1000, []int{100, 150, 200, 250, 300, 350, 400, 450, 500, 550, 600, 650, 700, 750, 800, 850, 900, 950}, 0,
			nil, []int{101, 149, 333, 777, 999}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var y yieldRule
			var cycles uint64
			got := map[int]bool{}
			n := 0
			for call := 1; call <= tc.calls; call++ {
				for _, at := range tc.gcAt {
					if at == call {
						cycles++
					}
				}
				if y.after(cycles) {
					got[call] = true
					n++
				}
			}
			if tc.yields != 0 && n != tc.yields {
				t.Errorf("%d yields, want %d", n, tc.yields)
			}
			for _, c := range tc.yield {
				if !got[c] {
					t.Errorf("call %d did not yield", c)
				}
			}
			for _, c := range tc.noYield {
				if got[c] {
					t.Errorf("call %d yielded", c)
				}
			}
		})
	}
}

// TestGCProbeCountsCycles checks the probe's cleanup counts a completed GC
// cycle and re-arms itself, natively (in a guest it runs at a yield).
func TestGCProbeCountsCycles(t *testing.T) {
	armGCProbe()
	before := gcCycles.Load()
	deadline := time.Now().Add(30 * time.Second)
	for gcCycles.Load() < before+2 { // two: the re-armed probe works too
		if time.Now().After(deadline) {
			t.Fatalf("probe counted %d cycles, want 2", gcCycles.Load()-before)
		}
		runtime.GC()
		runtime.Gosched() // let the cleanup goroutine run; the condition is re-checked
	}
}
