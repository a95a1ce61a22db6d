package plugins

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/plugins/internal/wasmbin"
)

// Per-call cost of a Go guest. A host that enforces call_timeout by running
// wazero with close-on-context-done (as volhost's first host did) makes every
// wasm loop header exit to Go to check the context. Go's wasm backend puts a loop at the
// entry of every non-leaf function and makes every jump within a function
// (a taken branch, a loop's back edge) through that loop, so a Go guest's
// per-call cost tracks the loop headers it executes. These benchmarks call
// the example modules through the real host path (Manager, call_timeout
// enforced) with the shapes the watcher sends, and report beside ns/op the
// median call (p50-ns), the guest function calls per call (guest-calls/op,
// counted with a wazero FunctionListener) and the loop headers per call
// (guest-loops/op, counted by a rewritten copy of the module: countLoops),
// the number to drive down. Both counts are means over 4,096 calls on a
// separate runtime, volhost_buffer included, so they include the SDK's
// occasional yields and the guest GC's share.
//
//	go test -run '^$' -bench GuestCost -benchtime 2000x ./plugins/
//	go test -run TestGuestCallCounts -v ./plugins/   # the functions called most
//
// With VOLHOST_GUESTCOST_BASELINE=DIR, DIR/default-policy.wasm and
// DIR/gcepd-adapter.wasm (for example built from an older commit) are
// measured in the same run as "baseline", beside "current", so a before and
// after comparison shares the machine's load.

// guestCostModule is one module measured by BenchmarkGuestCost.
type guestCostModule struct {
	name string // example module name
	kind string
	call func(ctx context.Context, m *Manager, module string) error
	// export and req drive the call counter directly through wazero.
	export string
	req    []byte
}

// adapterUnpublishRequest is what the watcher sends the GCE PD adapter for
// ControllerUnpublishVolume: node meta gce.project and gce.zone set, so the
// adapter builds the node ID from them (examples/plugins/gcepd-adapter).
func adapterUnpublishRequest() *abi.AdapterRequest {
	return &abi.AdapterRequest{
		Step:  "controller-unpublish",
		Claim: abi.ClaimView{AllocID: "alloc-0", NodeID: "node-0", Mode: "write", State: "node-detached", AccessMode: "single-node-writer", AttachmentMode: "file-system"},
		Volume: abi.VolumeView{Namespace: "default", ID: "web-data", PluginID: "gcepd", AccessMode: "single-node-writer",
			AttachmentMode: "file-system", ExternalID: "projects/p/zones/us-central1-a/disks/web-data"},
		Node: abi.NodeView{ID: "node-0", Status: "ready", Meta: map[string]string{
			"gce.project": "p", "gce.zone": "us-central1-a"}},
		Plugin:    abi.PluginView{ID: "gcepd", Provider: "pd.csi.storage.gke.io", PublishUnpublish: true},
		NowUnixMs: 1_750_000_000_000,
	}
}

func guestCostModules() []guestCostModule {
	policy := func(n int) guestCostModule {
		req := volumeRequest(n)
		return guestCostModule{
			name: "default-policy", kind: "release-policy",
			call: func(ctx context.Context, m *Manager, module string) error {
				resp, err := m.DecideRelease(ctx, module, req)
				if err == nil && len(resp.Decisions) != n {
					err = fmt.Errorf("%d decisions, want %d", len(resp.Decisions), n)
				}
				return err
			},
			export: abi.ExportDecideRelease, req: req.MarshalAppend(nil),
		}
	}
	adapt := adapterUnpublishRequest()
	return []guestCostModule{
		policy(1),
		policy(8),
		{
			name: "gcepd-adapter", kind: "csi-adapter",
			call: func(ctx context.Context, m *Manager, module string) error {
				resp, err := m.AdaptRequest(ctx, module, adapt)
				if err == nil && resp.NodeID != "projects/p/zones/us-central1-a/instances/node-0" {
					err = fmt.Errorf("node ID %q", resp.NodeID)
				}
				return err
			},
			export: abi.ExportAdaptRequest, req: adapt.MarshalAppend(nil),
		},
	}
}

// BenchmarkGuestCost measures one decision through a Wasm guest: the
// default policy on a 1-claim and an 8-claim request, and the GCE PD
// adapter on a controller-unpublish request. "current" is the Go guest as
// the host runs it, instrumented (wasmbin.Preempt: probes at function
// entries and loop headers); "loops-only" is the same module with probes
// at loop headers only, so one run measures what the entry probes cost,
// and "no-depth" is "current" without the call depth bound (MaxCallDepth),
// what that costs (docs/benchmarks-history.md "Entry probes"); "as" is the
// AssemblyScript port (examples/plugins/as-*), instrumented.
//
//	go test -run '^$' -bench 'GuestCost$' -benchtime 3000x -count 5 ./plugins/
func BenchmarkGuestCost(b *testing.B) {
	type variant struct {
		name  string
		wasm  func(tb testing.TB, module string) []byte
		probe func() (restore func()) // nil: the host's own instrumentation
	}
	asPort := func(tb testing.TB, module string) []byte { return exampleWasm(tb, "as-"+module) }
	variants := []variant{{"current", exampleWasm, nil}, {"loops-only", exampleWasm, loopProbesOnly},
		{"no-depth", exampleWasm, noDepthBound}, {"as", asPort, nil}}
	if dir := os.Getenv("VOLHOST_GUESTCOST_BASELINE"); dir != "" {
		variants = append(variants, variant{"baseline", func(tb testing.TB, module string) []byte {
			w, err := os.ReadFile(filepath.Join(dir, module+".wasm"))
			if err != nil {
				tb.Fatal(err)
			}
			return w
		}, nil})
	}
	for _, mod := range guestCostModules() {
		for _, v := range variants {
			b.Run(mod.shape(b)+"/"+v.name, func(b *testing.B) {
				if v.probe != nil {
					defer v.probe()()
				}
				wasm := v.wasm(b, mod.name)
				e := mod.warmEnv(b, wasm)
				ctx := context.Background()
				durs := make([]time.Duration, 0, 1<<16)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					start := time.Now()
					if err := mod.call(ctx, e.m, mod.name); err != nil {
						b.Fatal(err)
					}
					if len(durs) < cap(durs) {
						durs = append(durs, time.Since(start))
					}
				}
				b.StopTimer()
				reportDurations(b, durs)
				b.ReportMetric(guestCalls(b, wasm, mod.export, mod.req).PerCall(), "guest-calls/op")
				b.ReportMetric(guestLoops(b, wasm, mod.export, mod.req), "guest-loops/op")
			})
		}
	}
}

// shape names the benchmark case: the module, and a policy's claim count.
func (mod guestCostModule) shape(tb testing.TB) string {
	if mod.kind == "release-policy" {
		return fmt.Sprintf("%s/%dclaims", mod.name, countClaims(tb, mod.req))
	}
	return mod.name
}

// warmEnv loads wasm as the module, one instance that is never recycled,
// and warms it: its first calls grow the heap.
func (mod guestCostModule) warmEnv(b *testing.B, wasm []byte) *testEnv {
	e := newEnv(b, func(dir string) {
		writeModule(b, dir, mod.name, wasm, manifest(mod.kind, `limits {
  call_timeout = "1s"
  pool_size    = 1
  max_calls    = 100000000
}`))
	}, nil)
	for range 100 {
		if err := mod.call(context.Background(), e.m, mod.name); err != nil {
			b.Fatal(err)
		}
	}
	return e
}

// reportDurations reports the p50, p90, p99 and mean of per-call durations.
func reportDurations(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	var sum time.Duration
	for _, d := range durs {
		sum += d
	}
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(durs[len(durs)*9/10].Nanoseconds()), "p90-ns")
	b.ReportMetric(float64(durs[len(durs)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(durs)), "mean-ns")
}

// TestGuestCallCounts logs the guest function calls and loop headers per
// call of each benchmark shape, with the functions called most (run with
// -v), and checks the loop counter counts at least one header per call. It
// is skipped with -short and under -race: counting compiles the modules
// again, uncached.
func TestGuestCallCounts(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("compiles the modules uncached; run without -short and -race")
	}
	for _, mod := range guestCostModules() {
		c := guestCalls(t, exampleWasm(t, mod.name), mod.export, mod.req)
		if c.Total == 0 {
			t.Fatalf("%s %s: no guest calls counted", mod.name, mod.export)
		}
		loops := guestLoops(t, exampleWasm(t, mod.name), mod.export, mod.req)
		if loops < c.PerCall() {
			t.Fatalf("%s: %.1f loop headers per call, fewer than its %.1f calls: the loop counter is broken", mod.name, loops, c.PerCall())
		}
		t.Logf("%s %s (%d request bytes): %.1f guest function calls and %.1f loop headers per call", mod.name, mod.export, len(mod.req), c.PerCall(), loops)
		for _, f := range c.Top(25) {
			t.Logf("%6.2f %s", f.Calls, f.Name)
		}
	}
}

// TestGuestCallWork holds the default policy's 8-claim call, in each SDK,
// to the work the call-path cuts brought it to, counted (deterministic): guest function
// calls, loop headers (each a host probe, ABI.md section 12; in a Go guest
// also a taken jump through a function's dispatch loop) and bulk memory
// operations (memory.copy and memory.fill, each a call out of the compiled
// code into the host's memmove, and a probe charge).
//
//   - go: before the cut (the SDK, codec and policy of 359f2e8) 122.8
//     calls, 656.6 loop headers and 98 bulk operations per call; after
//     86.8, 431.6 and 24 (the test fails on the module built from 359f2e8).
//   - as: before (acae2ba's SDK and policy) 50 calls, 529 loop headers and
//     56 bulk operations; after 5, 61 and 0 (it fails on acae2ba's module):
//     the request decoded by whole-message readers with no loop per field,
//     views and Vecs set field by field instead of zeroed by memory.fill,
//     the response encoded in one pass with inline copies, the policy's
//     helpers inline and its status and ID comparisons by words.
//
// The bounds leave room for a compiler's change of layout, not for a
// return of the per-field loops (the request's decode), of the struct
// copies and fills, or of a call per item. Skipped with -short and under
// -race, like TestGuestCallCounts: counting compiles the module again,
// uncached (`make test` runs both in a run without -race).
func TestGuestCallWork(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("compiles the module uncached; run without -short and -race")
	}
	req := volumeRequest(8).MarshalAppend(nil)
	for _, tc := range []struct {
		name, module                string
		maxCalls, maxLoops, maxBulk float64
	}{
		{"go", "default-policy", 95, 500, 30},
		{"as", "as-default-policy", 10, 90, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wasm := exampleWasm(t, tc.module)
			c := guestCalls(t, wasm, abi.ExportDecideRelease, req).PerCall()
			l := guestLoops(t, wasm, abi.ExportDecideRelease, req)
			n := guestBulkOps(t, wasm, abi.ExportDecideRelease, req)
			t.Logf("%s, per 8-claim call: %.1f guest function calls, %.1f loop headers, %.1f bulk operations", tc.module, c, l, n)
			if c > tc.maxCalls {
				t.Errorf("%.1f guest function calls per 8-claim call, want at most %g", c, tc.maxCalls)
			}
			if l > tc.maxLoops {
				t.Errorf("%.1f loop headers per 8-claim call, want at most %g", l, tc.maxLoops)
			}
			if n > tc.maxBulk {
				t.Errorf("%.1f bulk memory operations per 8-claim call, want at most %g", n, tc.maxBulk)
			}
		})
	}
}

// guestBulkOps is the bulk memory and table operations (memory.copy,
// memory.fill and the rest, wasmbin.Probe.BulkCode) per call of export
// with req, counted like guestLoops.
func guestBulkOps(tb testing.TB, wasm []byte, export string, req []byte) float64 {
	tb.Helper()
	counted, err := wasmbin.Instrument(wasm, wasmbin.Probe{
		Globals: []wasmbin.Global{{Type: 0x7e, Export: loopsGlobal}},
		Code:    func(b []byte, _, _ uint32) []byte { return b },
		BulkCode: func(b []byte, global, _ uint32) []byte {
			inc := protowire.AppendVarint(append(b, 0x23), uint64(global)) // global.get
			inc = append(inc, 0x42, 0x01, 0x7c, 0x24)                      // i64.const 1, i64.add, global.set
			return protowire.AppendVarint(inc, uint64(global))
		},
	})
	if err != nil {
		tb.Fatalf("instrumenting the module: %v", err)
	}
	return countedPerCall(tb, counted, export, req, 1024)
}

// countedPerCall runs export with req on counted, a module instrumented to
// count into the exported loopsGlobal, and returns the count's mean over
// countedCalls calls after 500 warm-up calls: the steady state.
func countedPerCall(tb testing.TB, counted []byte, export string, req []byte, countedCalls int) float64 {
	tb.Helper()
	in := newRawInstance(tb, context.Background(), counted)
	const warmupCalls = 500
	var before uint64
	for i := range warmupCalls + countedCalls {
		if i == warmupCalls {
			before = in.mod.ExportedGlobal(loopsGlobal).Get()
		}
		in.call(tb, export, req)
	}
	return float64(in.mod.ExportedGlobal(loopsGlobal).Get()-before) / float64(countedCalls)
}

func countClaims(tb testing.TB, req []byte) int {
	var r abi.PolicyRequest
	if err := r.Unmarshal(req); err != nil {
		tb.Fatal(err)
	}
	return len(r.Claims)
}

// callCount is the guest function calls made over Calls export calls.
type callCount struct {
	Calls int
	Total int
	By    map[string]int
}

// PerCall is the mean guest function calls of one export call.
func (c callCount) PerCall() float64 { return float64(c.Total) / float64(c.Calls) }

type funcCalls struct {
	Name  string
	Calls float64 // per export call
}

// Top returns the n functions called most, most first.
func (c callCount) Top(n int) []funcCalls {
	all := make([]funcCalls, 0, len(c.By))
	for k, v := range c.By {
		all = append(all, funcCalls{k, float64(v) / float64(c.Calls)})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Calls != all[j].Calls {
			return all[i].Calls > all[j].Calls
		}
		return all[i].Name < all[j].Name
	})
	return all[:min(n, len(all))]
}

// callCounter is a FunctionListener counting guest function entries while on.
type callCounter struct {
	on     bool
	counts map[string]int
}

func (c *callCounter) Before(_ context.Context, _ api.Module, def api.FunctionDefinition, _ []uint64, _ experimental.StackIterator) {
	if c.on {
		c.counts[def.DebugName()]++
	}
}

func (*callCounter) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

func (*callCounter) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

var (
	countedMu sync.Mutex
	counted   = map[string]callCount{}
)

// guestCalls counts the guest functions entered per call of export with
// req (and of volhost_buffer before it, which the host calls first), as the
// mean over countedCalls calls after warmupCalls on the same instance: the
// steady state, including the SDK's occasional yields and GC cycles, not the
// first calls' heap growth. Results are memoised per module, export and
// request: counting compiles the module again, uncached.
func guestCalls(tb testing.TB, wasm []byte, export string, req []byte) callCount {
	tb.Helper()
	key := fmt.Sprintf("%x/%s/%x", sha256.Sum256(wasm), export, req)
	countedMu.Lock()
	defer countedMu.Unlock()
	if c, ok := counted[key]; ok {
		return c
	}
	cl := &callCounter{counts: map[string]int{}}
	ctx := experimental.WithFunctionListenerFactory(context.Background(),
		experimental.FunctionListenerFactoryFunc(func(api.FunctionDefinition) experimental.FunctionListener { return cl }))
	in := newRawInstance(tb, ctx, wasm)
	const warmupCalls, countedCalls = 500, 4096
	for i := range warmupCalls + countedCalls {
		cl.on = i >= warmupCalls
		in.call(tb, export, req)
	}
	c := callCount{Calls: countedCalls, By: cl.counts}
	for _, v := range cl.counts {
		c.Total += v
	}
	counted[key] = c
	return c
}

// TestGuestMemoryBoundedLargeGarbage is TestGuestMemoryBounded (memory_test.go)
// for the case that needs the guest SDK's yields (abi/guest/yield.go): 256
// KiB of garbage per call, a large object each, in 16 MiB of memory, like
// the allocating-policy example. A guest that yields only every 16th call
// runs out of memory within about 2,000 calls, one that yields every 4th
// grows to 192 pages by 5,000; with the SDK's rule memory stays level (120
// pages over 20,000 calls). It lives here, beside the guest cost
// benchmarks, because it guards the yield rule they measure.
func TestGuestMemoryBoundedLargeGarbage(t *testing.T) {
	const capPages = 256
	n := 5000
	if testing.Short() {
		n = 2500
	}
	early, end, _ := runAllocating(t, 256, capPages, n, 500)
	t.Logf("%d calls of 256 KiB garbage: memory %d pages after 500 calls, %d at the end (cap %d)", n, early, end, capPages)
	if end > early+16 { // 1 MiB: the heap grows in steps of 16 pages or more
		t.Fatalf("memory grew from %d to %d pages over %d calls (cap %d)", early, end, n, capPages)
	}
}

// guestLoops counts the wasm loop headers executed per call of export with
// req, as the mean over countedCalls calls after warmupCalls: under
// close-on-context-done wazero exits to Go at every loop header, and a Go
// guest enters one at every non-leaf function entry and at every jump
// within a function (Go's wasm backend jumps through a dispatch loop), so
// this is the count of those exits, the guest's per-call cost. The module
// is rewritten by countLoops to count them in an exported global.
func guestLoops(tb testing.TB, wasm []byte, export string, req []byte) float64 {
	tb.Helper()
	counted, err := countLoops(wasm)
	if err != nil {
		tb.Fatalf("instrumenting the module: %v", err)
	}
	return countedPerCall(tb, counted, export, req, 4096)
}

// rawInstance is one instance of a module in a wazero runtime of its own,
// with the host modules but none of the Manager's validation, limits or
// instrumentation: for counting a guest's work, and for requests the
// Manager would refuse to pass on or whose answers it would refuse.
type rawInstance struct {
	ctx context.Context
	mod api.Module
}

// newRawInstance instantiates wasm and runs its _initialize; ctx may carry
// a function listener factory.
func newRawInstance(tb testing.TB, ctx context.Context, wasm []byte) *rawInstance {
	tb.Helper()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig())
	tb.Cleanup(func() { _ = rt.Close(ctx) })
	if err := instantiateHostModules(ctx, rt, hclog.NewNullLogger()); err != nil {
		tb.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions(abi.ExportInitialize))
	if err != nil {
		tb.Fatal(err)
	}
	return &rawInstance{ctx: ctx, mod: mod}
}

// call runs export on req the way the host does (volhost_buffer, write,
// export) and returns a copy of the response bytes.
func (in *rawInstance) call(tb testing.TB, export string, req []byte) []byte {
	tb.Helper()
	res, err := in.mod.ExportedFunction(abi.ExportBuffer).Call(in.ctx, uint64(len(req)))
	if err != nil || res[0] == 0 {
		tb.Fatalf("volhost_buffer(%d) = %v, %v", len(req), res, err)
	}
	if !in.mod.Memory().Write(uint32(res[0]), req) {
		tb.Fatal("request does not fit guest memory")
	}
	res, err = in.mod.ExportedFunction(export).Call(in.ctx, uint64(len(req)))
	if err != nil {
		tb.Fatalf("%s: %v (request %x)", export, err, req)
	}
	ptr, n := abi.UnpackResult(res[0])
	if n == 0 {
		return nil
	}
	b, ok := in.mod.Memory().Read(ptr, n)
	if !ok {
		tb.Fatalf("%s: result (%d, %d) outside memory", export, ptr, n)
	}
	return slices.Clone(b)
}

// loopsGlobal is the exported global countLoops adds.
const loopsGlobal = "volhost_test_loops"

// countLoops returns wasm with a mutable i64 global, exported as
// loopsGlobal, that every loop header increments.
func countLoops(wasm []byte) ([]byte, error) {
	return wasmbin.Instrument(wasm, wasmbin.Probe{
		Globals: []wasmbin.Global{{Type: 0x7e, Export: loopsGlobal}},
		Code: func(b []byte, global, _ uint32) []byte {
			inc := protowire.AppendVarint(append(b, 0x23), uint64(global)) // global.get
			inc = append(inc, 0x42, 0x01, 0x7c, 0x24)                      // i64.const 1, i64.add, global.set
			return protowire.AppendVarint(inc, uint64(global))
		},
	})
}

// BenchmarkGuestCostCold is BenchmarkGuestCost with the CPU caches cold:
// 64 MiB are written between two calls (not timed), as a busy host's own
// work (raft, the store, HTTP) evicts the guest's code and heap between two
// calls to an instance. It reports the p50 and mean of the calls alone.
//
//	go test -run '^$' -bench GuestCostCold -benchtime 300x ./plugins/
func BenchmarkGuestCostCold(b *testing.B) {
	junk := make([]byte, 64<<20)
	for _, mod := range guestCostModules() {
		for _, v := range []struct{ name, module string }{
			{TimeoutsFlag, mod.name},
			{"as-" + TimeoutsFlag, "as-" + mod.name}, // the AssemblyScript port
		} {
			b.Run(mod.shape(b)+"/"+v.name, func(b *testing.B) {
				e := mod.warmEnv(b, exampleWasm(b, v.module))
				ctx := context.Background()
				var durs []time.Duration
				var i byte
				for b.Loop() {
					b.StopTimer()
					i++
					for j := 0; j < len(junk); j += 64 {
						junk[j] += i
					}
					b.StartTimer()
					start := time.Now()
					if err := mod.call(ctx, e.m, mod.name); err != nil {
						b.Fatal(err)
					}
					durs = append(durs, time.Since(start))
				}
				reportDurations(b, durs)
			})
		}
	}
}
