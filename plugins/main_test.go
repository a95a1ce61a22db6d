package plugins

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/plugins/internal/wasmbin"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// Test modules come from examples/plugins, built once per test binary by
// pluginstest, and are compiled by wazero through the one on-disk cache
// shared by every package and run: compiling a Go guest under -race is
// slow, loading it from the cache is not (BenchmarkCompile).

// cacheDir is the shared compilation cache.
var cacheDir = pluginstest.CacheDir()

// exampleWasm returns examples/plugins/NAME built as a wasip1 c-shared module.
func exampleWasm(t testing.TB, name string) []byte {
	t.Helper()
	return pluginstest.Wasm(t, name)
}

// manifest renders a test manifest.
func manifest(kind string, extra string) []byte {
	return []byte(fmt.Sprintf("kind = %q\nversion = \"1.0.0\"\n%s\n", kind, extra))
}

// writeModule writes NAME.wasm and NAME.hcl into dir atomically (rename),
// like an operator's deploy tool would.
func writeModule(t testing.TB, dir, name string, wasm, hcl []byte) {
	t.Helper()
	if hcl != nil {
		writeAtomic(t, filepath.Join(dir, name+".hcl"), hcl)
	}
	if wasm != nil {
		writeAtomic(t, filepath.Join(dir, name+".wasm"), wasm)
	}
}

func writeAtomic(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type testEnv struct {
	m      *Manager
	dir    string
	clock  *clockwork.FakeClock
	mu     sync.Mutex
	events []Event
	evCh   chan Event
}

func (e *testEnv) eventsOf(kind EventKind) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Event
	for _, ev := range e.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// newEnv starts a Manager over a fresh directory filled by setup.
func newEnv(t testing.TB, setup func(dir string), tweak func(*Options)) *testEnv {
	t.Helper()
	e := &testEnv{dir: t.TempDir(), clock: clockwork.NewFakeClock(), evCh: make(chan Event, 1024)}
	if setup != nil {
		setup(e.dir)
	}
	opts := Options{
		Dir:      e.dir,
		CacheDir: cacheDir,
		Logger:   hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}}),
		Clock:    e.clock,
		OnEvent: func(ev Event) {
			e.mu.Lock()
			e.events = append(e.events, ev)
			e.mu.Unlock()
			select {
			case e.evCh <- ev:
			default:
			}
		},
	}
	if tweak != nil {
		tweak(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := NewManager(ctx, opts)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	e.m = m
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := m.runtimes.Load(); n != 0 {
			t.Errorf("%d runtimes still open after Close", n)
		}
	})
	return e
}

// testWriter sends the manager's warnings into the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// runtimeYield lets other goroutines run while a test spins on a counter.
func runtimeYield() { runtime.Gosched() }

// loopProbesOnly makes the host instrument modules with probes at loop
// headers only, not at function entries: the instrumentation before the
// sandbox hardening, kept only so BenchmarkGuestCost can measure what the entry probes
// cost in the same run. It is not a safe configuration (a loop-free
// recursion escapes it), until the returned function restores it. Tests
// using it must not run in parallel with others.
func loopProbesOnly() (restore func()) {
	return probesWithout(func(p *wasmbin.Probe) { p.FunctionEntry = false })
}

// noDepthBound instruments without the call depth bound, so
// BenchmarkGuestCost measures what the bound costs. Not a safe
// configuration either (see MaxCallDepth).
func noDepthBound() (restore func()) {
	return probesWithout(func(p *wasmbin.Probe) { p.DepthLimit = 0 })
}

func probesWithout(edit func(*wasmbin.Probe)) (restore func()) {
	saved := instrument
	instrument = func(wasm []byte, tableLimit uint32) ([]byte, error) {
		p := wasmbin.Preempt
		p.TableLimit, p.DepthLimit = tableLimit, MaxCallDepth
		edit(&p)
		return wasmbin.Instrument(wasm, p)
	}
	return func() { instrument = saved }
}
