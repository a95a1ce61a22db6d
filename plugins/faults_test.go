package plugins

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
)

// faultCallTimeout leaves a Go guest dying of out-of-memory time to print
// its fatal error under -race on a loaded machine: every loop iteration of
// its allocator exits to the host for the close-on-context-done check.
const faultCallTimeout = 3 * time.Second

// faultRequest asks fault-policy to misbehave in mode for this one request
// (examples/plugins/fault-policy: volume context key "fault.mode").
func faultRequest(mode string) *abi.PolicyRequest {
	req := volumeRequest(3)
	req.Volume.Context = map[string]string{"fault.mode": mode}
	return req
}

func TestFaultIsolation(t *testing.T) {
	faulty := exampleWasm(t, "fault-policy")
	healthy := exampleWasm(t, "default-policy")
	const memPages = 128
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "fault-policy", faulty, manifest("release-policy", `limits {
  memory_pages = 128
  call_timeout = "3s"
  pool_size    = 2
}`))
		writeModule(t, dir, "default-policy", healthy, manifest("release-policy", policyManifest))
	}, func(o *Options) { o.BreakerThreshold = 100 })
	ctx := context.Background()

	// A healthy module called continuously while the faulty one misbehaves:
	// none of its calls may fail.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var healthyCalls, healthyFailures atomic.Int64
	var firstFailure atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		req := volumeRequest(8)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.m.DecideRelease(ctx, "default-policy", req); err != nil {
				healthyFailures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
			healthyCalls.Add(1)
		}
	}()

	tests := []struct {
		mode       string
		want       FaultKind
		wantOutput string // substring of the captured guest output, if any
	}{
		{"panic", FaultGuestError, ""},
		{"error", FaultGuestError, ""},
		{"trap", FaultTrap, "deliberate unrecovered panic"},
		{"spin", FaultTimeout, ""},
		{"oom", FaultOOM, "out of memory"},
		{"malformed", FaultBadOutput, ""},
		{"stranger", FaultBadOutput, ""},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			start := time.Now()
			_, err := e.m.DecideRelease(ctx, "fault-policy", faultRequest(tt.mode))
			elapsed := time.Since(start)
			fe := assertFault(t, err, tt.want)
			if fe.Module != "fault-policy" || fe.Version != "1.0.0" {
				t.Errorf("fault names module %q version %q", fe.Module, fe.Version)
			}
			if tt.wantOutput != "" && !strings.Contains(fe.Output, tt.wantOutput) {
				t.Errorf("guest output %q does not contain %q", fe.Output, tt.wantOutput)
			}
			if len(fe.Output) > outputLimit {
				t.Errorf("guest output is %d bytes, over the %d bound", len(fe.Output), outputLimit)
			}
			if tt.want == FaultTimeout && elapsed < faultCallTimeout {
				t.Errorf("timed out after %v, before the %v call_timeout", elapsed, faultCallTimeout)
			}
			t.Logf("%s: %v after %v", tt.mode, fe.Kind, elapsed)
			// The pool recovers: the next calls work (more than pool_size,
			// so a discarded instance must have been replaced).
			for i := 0; i < 3; i++ {
				resp, err := e.m.DecideRelease(ctx, "fault-policy", faultRequest("ok"))
				if err != nil {
					t.Fatalf("call %d after the %s fault: %v", i, tt.mode, err)
				}
				if len(resp.Decisions) != 3 {
					t.Fatalf("call %d after the %s fault: %d decisions", i, tt.mode, len(resp.Decisions))
				}
			}
			st, _ := e.m.StatusOf("fault-policy")
			if st.MemoryPages > memPages {
				t.Errorf("memory %d pages over the %d cap", st.MemoryPages, memPages)
			}
		})
	}
	close(stop)
	wg.Wait()
	if n := healthyFailures.Load(); n != 0 {
		t.Fatalf("%d of %d healthy calls failed while the faulty module misbehaved; first: %v", n, healthyCalls.Load(), firstFailure.Load())
	}
	if healthyCalls.Load() == 0 {
		t.Fatal("the healthy module was never called")
	}
	st, _ := e.m.StatusOf("fault-policy")
	for _, k := range []FaultKind{FaultGuestError, FaultTrap, FaultTimeout, FaultOOM, FaultBadOutput} {
		if st.Faults[string(k)] == 0 {
			t.Errorf("status faults %v: no %s counted", st.Faults, k)
		}
	}
	if st.State != StateServing {
		t.Errorf("state %s after isolated faults, want serving", st.State)
	}
}
