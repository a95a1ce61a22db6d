package extism

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

// TestGuestSteadyStateWork runs the 8-claim default-policy call straight
// through wazero (no host instrumentation, a function listener counting
// every guest function entry) on each guest, 500 calls to warm up, then
// counts 2,000, and checks the property both SDKs promise: no
// allocation per call in steady state.
//
//   - Go guest (abi/guest HandleReleaseInto + defaultpolicy.DecideInto):
//     no call into runtime.mallocgc*, and so no GC work (gcStart, mark
//     workers, write barriers) either. An allocation coming back anywhere
//     on the call path, SDK or policy, fails the test.
//   - AssemblyScript guest: its call arena is reset by every export, so
//     memory does not grow over the counted calls.
//
// Every answer is checked against the native defaultpolicy.Decide. With -v
// it logs the guest function calls per call and the functions called most
// (the before/after of docs/benchmarks-history.md "Guest side of a call"); the modules
// named by VOLHOST_CALL_BASELINE and VOLHOST_CALL_BASELINE_AS are counted
// too, for that comparison, but not held to the property.
func TestGuestSteadyStateWork(t *testing.T) {
	req := volumeRequest()
	in := req.MarshalAppend(nil)
	want := defaultpolicy.Decide(req)
	type module struct {
		name, path string
		goGuest    bool
		checked    bool // held to the no-allocation property
	}
	mods := []module{
		{"go", filepath.Join(buildDir, "default-policy.wasm"), true, true},
		{"as", filepath.Join(repoRoot, "examples", "plugins", "build", "as-default-policy.wasm"), false, true},
	}
	if p := os.Getenv("VOLHOST_CALL_BASELINE"); p != "" {
		mods = append(mods, module{"go-baseline", p, true, false})
	}
	if p := os.Getenv("VOLHOST_CALL_BASELINE_AS"); p != "" {
		mods = append(mods, module{"as-baseline", p, false, false})
	}
	for _, m := range mods {
		t.Run(m.name, func(t *testing.T) {
			wasm, err := os.ReadFile(m.path)
			if err != nil {
				t.Fatalf("%v (the AssemblyScript guest: run make plugins first)", err)
			}
			counts := map[string]int{}
			on := false
			ctx := experimental.WithFunctionListenerFactory(context.Background(),
				experimental.FunctionListenerFactoryFunc(func(def api.FunctionDefinition) experimental.FunctionListener {
					name := def.DebugName()
					return experimental.FunctionListenerFunc(func(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
						if on {
							counts[name]++
						}
					})
				}))
			mod := instantiateRaw(t, ctx, wasm)
			const warm, counted = 500, 2000
			var pages uint32
			for i := range warm + counted {
				if i == warm {
					on, pages = true, mod.mod.Memory().Size()
				}
				var got abi.PolicyResponse
				if err := got.Unmarshal(mod.call(t, ctx, abi.ExportDecideRelease, in)); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Decisions, want.Decisions) || got.Error != "" {
					t.Fatalf("call %d: %+v, want %+v", i, got, *want)
				}
			}
			total, allocs := 0, 0
			for name, n := range counts {
				total += n
				// A debug name is "module.function", the module unnamed here.
				if _, fn, _ := strings.Cut(name, "."); strings.HasPrefix(fn, "runtime.mallocgc") {
					allocs += n
				}
			}
			t.Logf("%s: %.1f guest function calls per call, %.2f of them runtime.mallocgc*; memory %d -> %d bytes over %d calls",
				m.name, float64(total)/counted, float64(allocs)/counted, pages, mod.mod.Memory().Size(), counted)
			for _, f := range topCalls(counts, 40) {
				t.Logf("%8.2f %s", float64(counts[f])/counted, f)
			}
			if !m.checked {
				return
			}
			if m.goGuest && total == 0 {
				t.Fatal("no guest function calls counted: the listener is not attached")
			}
			if allocs != 0 {
				t.Fatalf("%d calls into runtime.mallocgc over %d steady-state calls: a Go guest call allocates again", allocs, counted)
			}
			if got := mod.mod.Memory().Size(); got != pages {
				t.Fatalf("memory grew from %d to %d bytes over %d steady-state calls", pages, got, counted)
			}
		})
	}
}

// topCalls is the n names called most, most first.
func topCalls(counts map[string]int, n int) []string {
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if counts[names[i]] != counts[names[j]] {
			return counts[names[i]] > counts[names[j]]
		}
		return names[i] < names[j]
	})
	return names[:min(n, len(names))]
}

// rawGuest is a volhost guest instantiated straight in wazero, with WASI
// and the two volhost imports a module may use (logging off), its exports
// looked up once (each ExportedFunction call makes a new call engine).
type rawGuest struct {
	mod    api.Module
	buffer api.Function
	fns    map[string]api.Function
}

// instantiateRaw instantiates wasm as a rawGuest and runs _initialize.
func instantiateRaw(tb testing.TB, ctx context.Context, wasm []byte) *rawGuest {
	tb.Helper()
	rt := wazero.NewRuntime(ctx)
	tb.Cleanup(func() { _ = rt.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	_, err := rt.NewHostModuleBuilder("volhost").
		NewFunctionBuilder().WithFunc(func(int32, uint32, int32) {}).Export("log").
		NewFunctionBuilder().WithFunc(func() int32 { return abi.LogError + 1 }).Export("log_level").
		Instantiate(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions(abi.ExportInitialize))
	if err != nil {
		tb.Fatal(err)
	}
	return &rawGuest{mod: mod, buffer: mod.ExportedFunction(abi.ExportBuffer), fns: map[string]api.Function{}}
}

// call runs export on req as the host does (volhost_buffer, write,
// export) and returns the response, valid until the next call.
func (g *rawGuest) call(tb testing.TB, ctx context.Context, export string, req []byte) []byte {
	res, err := g.buffer.Call(ctx, uint64(len(req)))
	if err != nil || res[0] == 0 {
		tb.Fatalf("volhost_buffer(%d) = %v, %v", len(req), res, err)
	}
	if !g.mod.Memory().Write(uint32(res[0]), req) {
		tb.Fatal("request does not fit guest memory")
	}
	fn := g.fns[export]
	if fn == nil {
		fn = g.mod.ExportedFunction(export)
		g.fns[export] = fn
	}
	if res, err = fn.Call(ctx, uint64(len(req))); err != nil {
		tb.Fatalf("%s: %v", export, err)
	}
	ptr, n := abi.UnpackResult(res[0])
	b, ok := g.mod.Memory().Read(ptr, n)
	if !ok {
		tb.Fatalf("%s: result (%d, %d) outside memory", export, ptr, n)
	}
	return b
}
