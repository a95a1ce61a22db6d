package plugins

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tetratelabs/wazero"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

// Benchmarks for docs/benchmarks-history.md "Wasm ABI vs Extism". The policy benchmarks judge the
// same volume with 8 claims: (a) the native default policy, (b) the same
// logic as a Go guest through the volhost ABI with call_timeout enforced
// (by the host's instrumentation; close-on-context-done until the sandbox
// hardening). The Extism comparison (c) lives in the separate
// module test/extism so the product never depends on Extism.
//
//	go test -run '^$' -bench . -benchmem ./plugins/

func benchRequest() *abi.PolicyRequest { return volumeRequest(8) }

// BenchmarkPolicyNative is (a): defaultpolicy.Decide called directly.
func BenchmarkPolicyNative(b *testing.B) {
	req := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		resp := defaultpolicy.Decide(req)
		if len(resp.Decisions) != 8 {
			b.Fatal("wrong answer")
		}
	}
}

// BenchmarkPolicyWasm is (b): Manager.DecideRelease on default-policy.
func BenchmarkPolicyWasm(b *testing.B) {
	wasm := exampleWasm(b, "default-policy")
	e := newEnv(b, func(dir string) {
		writeModule(b, dir, "default-policy", wasm, manifest("release-policy", `limits {
  call_timeout = "1s"
  pool_size    = 4
}`))
	}, nil)
	req := benchRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := e.m.DecideRelease(ctx, "default-policy", req)
		if err != nil || len(resp.Decisions) != 8 {
			b.Fatalf("%v %v", resp, err)
		}
	}
}

// BenchmarkPolicyWasmParallel is (b) from GOMAXPROCS goroutines at once.
func BenchmarkPolicyWasmParallel(b *testing.B) {
	wasm := exampleWasm(b, "default-policy")
	e := newEnv(b, func(dir string) {
		writeModule(b, dir, "default-policy", wasm, manifest("release-policy", `limits {
  call_timeout = "1s"
  pool_size    = 4
}`))
	}, nil)
	ctx := context.Background()
	// Create the whole pool before timing: instantiating costs ~10 ms, and
	// with it in the first iterations the benchmark settles on a tiny b.N.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := e.m.DecideRelease(ctx, "default-policy", benchRequest()); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := benchRequest()
		for pb.Next() {
			if _, err := e.m.DecideRelease(ctx, "default-policy", req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCompile compiles default-policy cold (an empty cache each time)
// and from a warm on-disk cache.
func BenchmarkCompile(b *testing.B) {
	wasm := exampleWasm(b, "default-policy")
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig())
			if _, err := rt.CompileModule(ctx, wasm); err != nil {
				b.Fatal(err)
			}
			_ = rt.Close(ctx)
		}
	})
	b.Run("cached", func(b *testing.B) {
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			b.Fatal(err)
		}
		defer cache.Close(ctx)
		warm := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
		if _, err := warm.CompileModule(ctx, wasm); err != nil {
			b.Fatal(err)
		}
		_ = warm.Close(ctx)
		// A fresh cache object over the same directory: what a restarted
		// agent sees (the in-memory part of the cache is empty).
		for b.Loop() {
			c, _ := wazero.NewCompilationCacheWithDir(cacheDir)
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(c))
			if _, err := rt.CompileModule(ctx, wasm); err != nil {
				b.Fatal(err)
			}
			_ = rt.Close(ctx)
			_ = c.Close(ctx)
		}
	})
}

// servingGeneration loads default-policy and returns its generation.
func servingGeneration(b *testing.B) (*testEnv, *generation) {
	wasm := exampleWasm(b, "default-policy")
	e := newEnv(b, func(dir string) {
		writeModule(b, dir, "default-policy", wasm, manifest("release-policy", "limits {\n pool_size = 1\n}"))
	}, nil)
	return e, (*e.m.modules.Load())["default-policy"].cur.Load()
}

// BenchmarkInstantiate creates a pool instance: instantiate, _initialize,
// configure.
func BenchmarkInstantiate(b *testing.B) {
	_, g := servingGeneration(b)
	ctx := context.Background()
	for b.Loop() {
		inst, _, err := g.newInstance(ctx, false)
		if err != nil {
			b.Fatal(err)
		}
		inst.close()
	}
}

// BenchmarkPoolCheckout takes and returns a pooled instance.
func BenchmarkPoolCheckout(b *testing.B) {
	_, g := servingGeneration(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		inst, err := g.checkout(ctx)
		if err != nil {
			b.Fatal(err)
		}
		inst.calls-- // keep max_calls from recycling it
		g.checkin(inst, false)
	}
}

// BenchmarkHotSwap measures file written -> new generation serving, through
// Watch with a 1 ms debounce (the product default is 250 ms, added on top).
func BenchmarkHotSwap(b *testing.B) {
	wasm := exampleWasm(b, "default-policy")
	e := newEnv(b, func(dir string) { writeModule(b, dir, "policy", wasm, goodManifest(0)) },
		func(o *Options) { o.Clock = clockwork.NewRealClock(); o.Debounce = time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	e.m.watchReady = func() { close(ready) }
	go func() { done <- e.m.Watch(ctx) }()
	defer func() { cancel(); <-done }()
	<-ready
	for len(e.evCh) > 0 {
		<-e.evCh
	}
	i := 0
	for b.Loop() {
		i++
		writeAtomic(b, filepath.Join(e.dir, "policy.hcl"), goodManifest(i))
		for ev := range e.evCh {
			if ev.Kind == EventSwapped && ev.Version == fmt.Sprintf("1.0.%d", i) {
				break
			}
			if ev.Kind == EventRefused {
				b.Fatalf("refused: %s", ev.Reason)
			}
		}
	}
	_ = os.Remove
}

// BenchmarkYoungInstance: the first 3,000 one-claim calls of a fresh
// instance, whose Go heap grows page by page, with its linear memory
// reserved at the cap (memory_pages 256) and grown on demand (2048 pages,
// above maxReservedPages), where wazero copies the memory on every grow.
// Reported: mean and worst call.
//
//	go test -run '^$' -bench YoungInstance -benchtime 3x ./plugins/
func BenchmarkYoungInstance(b *testing.B) {
	wasm := exampleWasm(b, "default-policy")
	req := volumeRequest(1)
	for _, tc := range []struct {
		name  string
		pages int
	}{{"reserved", DefaultMemoryPages}, {"grown", 2 * maxReservedPages}} {
		b.Run(tc.name, func(b *testing.B) {
			if reserveMemory(uint32(tc.pages)) != (tc.name == "reserved") {
				b.Fatalf("memory_pages %d: reserveMemory disagrees with the case", tc.pages)
			}
			ctx := context.Background()
			var total, worst time.Duration
			calls := 0
			for b.Loop() {
				b.StopTimer()
				e := newEnv(b, func(dir string) {
					writeModule(b, dir, "default-policy", wasm, manifest("release-policy",
						fmt.Sprintf("limits {\n memory_pages = %d\n pool_size = 1\n call_timeout = \"10s\"\n}", tc.pages)))
				}, nil)
				b.StartTimer()
				for range 3000 {
					start := time.Now()
					if _, err := e.m.DecideRelease(ctx, "default-policy", req); err != nil {
						b.Fatal(err)
					}
					d := time.Since(start)
					total += d
					worst = max(worst, d)
					calls++
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(calls), "mean-ns/call")
			b.ReportMetric(float64(worst.Nanoseconds()), "worst-ns/call")
		})
	}
}
