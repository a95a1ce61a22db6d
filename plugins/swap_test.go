package plugins

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
	"github.com/volhost/volhost/internal/testutil"
)

func goodManifest(version int) []byte {
	return []byte(fmt.Sprintf(`kind = "release-policy"
version = "1.0.%d"
default = true
limits {
  call_timeout = "5s"
  pool_size    = 4
}
`, version))
}

func TestHotSwapUnderLoad(t *testing.T) {
	good := exampleWasm(t, "default-policy")
	faulty := exampleWasm(t, "fault-policy")
	e := newEnv(t, func(dir string) { writeModule(t, dir, "policy", good, goodManifest(0)) }, nil)
	ctx := context.Background()

	req := volumeRequest(8)
	want := defaultpolicy.Decide(req).Decisions

	var (
		stops    []func()
		calls    atomic.Int64
		failures atomic.Int64
		mu       sync.Mutex
		seen     = map[uint64]int{} // generation -> calls it answered
		firstErr error
	)
	for w := 0; w < 8; w++ {
		stops = append(stops, testutil.Repeat(func() bool {
			resp := new(abi.PolicyResponse)
			gen, err := e.m.call(ctx, "policy", abi.KindReleasePolicy, abi.ExportDecideRelease, req, policyDecoder(req, resp))
			calls.Add(1)
			if err == nil && !reflect.DeepEqual(resp.Decisions, want) {
				err = fmt.Errorf("generation %d answered %+v", gen, resp.Decisions)
			}
			mu.Lock()
			seen[gen]++
			if err != nil {
				failures.Add(1)
				if firstErr == nil {
					firstErr = err
				}
			}
			mu.Unlock()
			return true
		}))
	}

	// 20 replacements, bad and good alternating. Bad ones: bytes that do not
	// compile, and a module that compiles but refuses its configuration.
	goodGens := map[uint64]bool{1: true}
	var swapTimes []time.Duration
	for i := 1; i <= 20; i++ {
		before, _ := e.m.StatusOf("policy")
		var wantRefused bool
		switch {
		case i%4 == 1:
			writeModule(t, e.dir, "policy", []byte("\x00asm\x01\x00\x00\x00broken"), nil)
			wantRefused = true
		case i%4 == 3:
			writeModule(t, e.dir, "policy", faulty, []byte("kind = \"release-policy\"\nconfig = { mode = \"bogus\" }\n"))
			wantRefused = true
		default:
			writeModule(t, e.dir, "policy", good, goodManifest(i))
		}
		start := time.Now()
		if _, err := e.m.Reload(ctx); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		after, _ := e.m.StatusOf("policy")
		if after.State != StateServing {
			t.Fatalf("replacement %d: state %s (refusal %q), want serving", i, after.State, after.Refusal)
		}
		if wantRefused {
			if after.Refusal == "" || after.Generation != before.Generation {
				t.Fatalf("replacement %d (bad): refusal %q generation %d -> %d; want a refusal and the old generation serving",
					i, after.Refusal, before.Generation, after.Generation)
			}
		} else {
			swapTimes = append(swapTimes, time.Since(start))
			if after.Refusal != "" || after.Generation != before.Generation+1 || after.Version != fmt.Sprintf("1.0.%d", i) {
				t.Fatalf("replacement %d (good): %+v", i, after)
			}
			goodGens[after.Generation] = true
		}
		// Let every worker answer at least once on this generation.
		for n := calls.Load(); calls.Load() < n+8; {
			runtimeYield()
		}
	}
	for _, stop := range stops {
		stop()
	}

	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d calls failed during hot swaps; first: %v", n, calls.Load(), firstErr)
	}
	for gen, n := range seen {
		if !goodGens[gen] {
			t.Errorf("generation %d answered %d calls but never passed validation", gen, n)
		}
	}
	if len(seen) < 2 {
		t.Errorf("calls were answered by %d generation(s); the swaps happened under no load", len(seen))
	}
	// Old generations are closed once drained: one runtime for one module.
	if n := e.m.runtimes.Load(); n != 1 {
		t.Errorf("%d runtimes open after the swaps, want 1", n)
	}
	t.Logf("%d calls over %d generations; reload-to-serving per good swap: %v", calls.Load(), len(seen), swapTimes)
}

func TestWatchSwapsAndRetires(t *testing.T) {
	good := exampleWasm(t, "default-policy")
	e := newEnv(t, func(dir string) { writeModule(t, dir, "policy", good, goodManifest(0)) }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	ready := make(chan struct{})
	e.m.watchReady = func() { close(ready) }
	go func() { watchDone <- e.m.Watch(ctx) }()
	<-ready // a change before the watch is set up would go unseen
	defer func() {
		cancel()
		if err := <-watchDone; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	waitEvent := func(kind EventKind) Event {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			// The debounce timer exists once Watch saw the change; fire it.
			bctx, bcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			if e.clock.BlockUntilContext(bctx, 1) == nil {
				e.clock.Advance(DefaultDebounce)
			}
			bcancel()
			select {
			case ev := <-e.evCh:
				if ev.Kind == kind {
					return ev
				}
			case <-timeout:
				t.Fatalf("no %s event", kind)
			default:
			}
		}
	}
	// Drain the load event.
	for len(e.evCh) > 0 {
		<-e.evCh
	}
	writeModule(t, e.dir, "policy", nil, goodManifest(7))
	ev := waitEvent(EventSwapped)
	if ev.Generation != 2 || ev.Version != "1.0.7" {
		t.Fatalf("swap event %+v", ev)
	}
	if _, err := e.m.DecideRelease(ctx, "policy", volumeRequest(2)); err != nil {
		t.Fatalf("call after swap: %v", err)
	}
	for _, ext := range []string{".wasm", ".hcl"} {
		if err := os.Remove(filepath.Join(e.dir, "policy"+ext)); err != nil {
			t.Fatal(err)
		}
	}
	waitEvent(EventRetired)
	if st, _ := e.m.StatusOf("policy"); st.State != StateRetired {
		t.Fatalf("state %s after removal, want retired", st.State)
	}
	if _, ok := e.m.Match(abi.KindReleasePolicy, Target{Namespace: "default", VolumeID: "x"}); ok {
		t.Fatal("a retired module still matches")
	}
	_, err := e.m.DecideRelease(ctx, "policy", volumeRequest(2))
	assertFault(t, err, FaultNotLoaded)
	testutil.WaitFor(t, "the retired generation to close", func() bool { return e.m.runtimes.Load() == 0 })
}
