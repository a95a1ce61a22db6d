package plugins

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/abi"
)

// faultCallTimeout leaves a Go guest dying of out-of-memory time to print
// its fatal error under -race on a loaded machine: every loop iteration of
// its allocator exits to the host for the close-on-context-done check.
const faultCallTimeout = 3 * time.Second

// faultRequest asks fault-policy to misbehave in mode for this one request
// (plugins/pluginstest/modules/fault-policy: volume context key "fault.mode").
func faultRequest(mode string) *abi.PolicyRequest {
	req := volumeRequest(3)
	req.Volume.Context = map[string]string{"fault.mode": mode}
	return req
}

// TestFaultIsolation: each way a module can fail is its own fault kind,
// costs only that call, and a healthy module called meanwhile never fails.
func TestFaultIsolation(t *testing.T) {
	const timeouts = TimeoutsFlag
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
	if st.Timeouts != timeouts {
		t.Errorf("status timeouts %q, want %q", st.Timeouts, timeouts)
	}
}

// TestCallerCancelStopsCall: a caller giving up (the watcher losing
// leadership, the agent shutting down) stops a running call at once, long
// before its call_timeout. The result is the caller's error, naming the
// export it stopped, not a module fault, and the pool recovers.
func TestCallerCancelStopsCall(t *testing.T) {
	e, spinning := newSpinEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := spinThenCancel(t, e, spinning, ctx, cancel); !strings.Contains(err.Error(), abi.ExportDecideRelease) {
		t.Fatalf("err = %v, want the caller's context.Canceled during %s", err, abi.ExportDecideRelease)
	}
	resp, err := e.m.DecideRelease(context.Background(), "fault-policy", faultRequest("ok"))
	if err != nil || len(resp.Decisions) != 3 {
		t.Fatalf("the next call: %v, %v", resp, err)
	}
}

// TestCallerCancelKeptWatch: the watch of the caller's context is kept on
// the instance across calls (armTimer), and still stops a spinning call
// when that context ends, after calls on it, or after calls on another
// context the watch moved from. An ended context left watched by an idle
// instance fails its next call at once, without stopping another
// context's.
func TestCallerCancelKeptWatch(t *testing.T) {
	e, spinning := newSpinEnv(t)
	ok := func(ctx context.Context) {
		t.Helper()
		resp, err := e.m.DecideRelease(ctx, "fault-policy", faultRequest("ok"))
		if err != nil || len(resp.Decisions) != 3 {
			t.Fatalf("an ok call: %v, %v", resp, err)
		}
	}
	// The same context for calls before the spin: the watch is kept.
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	for range 3 {
		ok(ctx1)
	}
	spinThenCancel(t, e, spinning, ctx1, cancel1)

	// A context with calls on it, then another one: the watch moves.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	ok(ctx2)
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	ok(ctx3)
	cancel2() // no longer watched: nothing to stop
	ok(ctx3)
	spinThenCancel(t, e, spinning, ctx3, cancel3)

	// An idle instance still watching a context that then ends.
	ctx4, cancel4 := context.WithCancel(context.Background())
	ok(ctx4)
	cancel4()
	if _, err := e.m.DecideRelease(ctx4, "fault-policy", faultRequest("ok")); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call on an ended context: %v, want context.Canceled", err)
	}
	ok(context.Background())
}

// lineSignal passes log output on to next and signals ch, without
// blocking, when a write contains substr.
type lineSignal struct {
	substr string
	ch     chan<- struct{}
	next   io.Writer
}

func (w lineSignal) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.substr)) {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
	return w.next.Write(p)
}

// TestInstrumenterFailureRefuses: an instrumented copy that does not
// compile (a bug in the instrumenter) refuses the module with the reason;
// it is never served without the probes (there is no weaker fallback).
func TestInstrumenterFailureRefuses(t *testing.T) {
	saved := instrument
	defer func() { instrument = saved }()
	instrument = func([]byte, uint32) ([]byte, error) {
		return append([]byte("\x00asm\x01\x00\x00\x00"), 0x0a, 0x01, 0x05), nil // a code section promising 5 bodies
	}
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "default-policy", exampleWasm(t, "default-policy"), manifest("release-policy", policyManifest))
	}, nil)
	st, ok := e.m.StatusOf("default-policy")
	if !ok || st.State != StateRefused || !strings.Contains(st.Refusal, "(instrumented)") {
		t.Fatalf("status %+v, want refused naming the instrumented copy", st)
	}
	_, err := e.m.DecideRelease(context.Background(), "default-policy", volumeRequest(3))
	assertFault(t, err, FaultNotLoaded)
}

// newSpinEnv loads fault-policy with one pooled instance and a 10m
// call_timeout; the channel is signalled when its guest logs that it
// spins, so cancelling after that stops a running call, not one still
// being set up.
func newSpinEnv(t *testing.T) (*testEnv, <-chan struct{}) {
	t.Helper()
	spinning := make(chan struct{}, 1)
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "fault-policy", exampleWasm(t, "fault-policy"), manifest("release-policy", `limits {
  call_timeout = "10m"
  pool_size    = 1
}`))
	}, func(o *Options) {
		o.Maxima.CallTimeout = time.Hour
		o.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: lineSignal{"fault-policy: spinning", spinning, testWriter{t}}})
	})
	return e, spinning
}

// spinThenCancel starts a spinning call on ctx, cancels ctx once the
// guest spins, and returns the call's error after checking that it is the
// caller's context.Canceled and not a module fault.
func spinThenCancel(t *testing.T, e *testEnv, spinning <-chan struct{}, ctx context.Context, cancel context.CancelFunc) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := e.m.DecideRelease(ctx, "fault-policy", faultRequest("spin"))
		done <- err
	}()
	select {
	case <-spinning:
	case err := <-done:
		t.Fatalf("the spin call returned before spinning: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || faultOf(err) != nil {
			t.Fatalf("err = %v, want the caller's context.Canceled, not a module fault", err)
		}
		return err
	case <-time.After(time.Minute):
		t.Fatal("cancelling the caller did not stop the call (its call_timeout is 10m)")
	}
	return nil
}
