package watcher

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/watcher/attach"
)

// Wasm vs native: the watcher's release throughput and
// step-up assessment time (the shapes of BenchmarkReleaseThroughput and
// BenchmarkStepUp) with the default-policy and gcepd-adapter Wasm modules
// serving every volume, against the native DefaultPolicy and SpecAdapter,
// in the same run and interleaved (native, Wasm, Wasm, native, ...), so
// machine noise hits both sides alike. Reported: each side's number and
// the ratio Wasm/native (targets: throughput >= 0.95, step-up <= 2).
//
//	go test -run '^$' -bench 'WasmVsNative' -benchtime 3x ./watcher/

// benchWasmModules loads the policy example (default for every volume) and
// the adapter example (for the benchmark's plugin) with a pool as large as
// the watcher's concurrency, and warms every pool instance until its heap
// has reached its steady size, as a long-running agent's are (a young
// instance's linear memory grows, and each wazero memory.grow copies it).
// It returns the Wasm policy with the native adapter, and both in Wasm.
func benchWasmModules(b *testing.B, policy, adapter string) (policyOnly, both Modules) {
	b.Helper()
	const pool = 16
	limits := fmt.Sprintf(`limits {
  memory_pages = 256
  call_timeout = "10s"
  pool_size    = %d
  max_calls    = 1000000
}`, pool)
	m := newWasmManager(b, clockwork.NewRealClock(),
		moduleFile{name: policy, example: policy,
			manifest: "kind = \"release-policy\"\nversion = \"1.0.0\"\ndefault = true\n" + limits},
		moduleFile{name: adapter, example: adapter,
			manifest: fmt.Sprintf("kind = \"csi-adapter\"\nversion = \"1.0.0\"\nplugin_ids = [%q]\n%s", testPlugin, limits)},
	)
	both = WasmModules(m, nil)
	policyOnly = policyOnlyModules{both}
	v := &structs.Volume{Namespace: "default", ID: "v", PluginID: testPlugin}
	if n, ok := both.PolicyFor(v).(attach.Named); !ok || n.ModuleName() != policy {
		b.Fatalf("policy is not the Wasm module: %T", both.PolicyFor(v))
	}
	if n, ok := both.AdapterFor(v).(attach.Named); !ok || n.ModuleName() != adapter {
		b.Fatalf("adapter is not the Wasm module: %T", both.AdapterFor(v))
	}
	// Warm: pool-wide concurrent calls of the benchmark's shapes.
	store := benchStore(1, 1)
	w := New(Config{Clock: clockwork.NewRealClock()}, Deps{Feed: store, State: store, Writer: store,
		Node: latencyCSI{}, Controller: latencyCSI{}, Modules: both}, hclog.NewNullLogger())
	p, err := w.load(structs.VolumeRef{Namespace: "default", ID: "v000000"})
	if err != nil || p == nil || len(p.claims) != 1 {
		b.Fatalf("warm-up volume: %v", err)
	}
	var c *structs.Claim
	for _, c = range p.claims {
	}
	preq := p.policyRequest()
	areq := p.subject(c).Request(StepControllerUnpublish)
	ctx := context.Background()
	err = testutil.FanOut(pool, pool*1500, func(int) error {
		if _, err := both.PolicyFor(v).DecideRelease(ctx, preq); err != nil {
			return err
		}
		_, err := both.AdapterFor(v).AdaptRequest(ctx, areq)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range m.Status() {
		if st.State != "serving" || len(st.Faults) != 0 {
			b.Fatalf("module %s after warm-up: %+v", st.Name, st)
		}
	}
	return policyOnly, both
}

// policyOnlyModules serves the Wasm policy and the native adapter: the
// common deployment (a custom release policy, a spec-conformant driver).
type policyOnlyModules struct{ wasm Modules }

func (m policyOnlyModules) PolicyFor(v *structs.Volume) Policy      { return m.wasm.PolicyFor(v) }
func (policyOnlyModules) AdapterFor(*structs.Volume) attach.Adapter { return SpecAdapter{} }

// runReleases releases n claims through a fresh watcher and returns claims/s.
func runReleases(b *testing.B, mods Modules, n, ctl int, latency time.Duration) float64 {
	b.Helper()
	store := benchStore(n, n)
	m := &benchMetrics{target: int64(n), done: make(chan struct{})}
	w := New(Config{Clock: clockwork.NewRealClock(), Metrics: m, ControllerConcurrency: ctl},
		Deps{Feed: store, State: store, Writer: store, Node: latencyCSI{latency}, Controller: latencyCSI{latency}, Modules: mods},
		hclog.NewNullLogger())
	start := time.Now()
	w.SetEnabled(true)
	<-m.done
	d := time.Since(start)
	w.SetEnabled(false)
	return float64(n) / d.Seconds()
}

// runStepUp is BenchmarkStepUp's measurement: the time from enabling a
// watcher over total volumes, releasable of which have a releasable claim,
// until every releasable one is released and the first batch looked through.
func runStepUp(b *testing.B, mods Modules, total, releasable int) time.Duration {
	b.Helper()
	store := benchStore(total, releasable)
	m := &benchMetrics{target: int64(releasable), done: make(chan struct{})}
	w := New(Config{Clock: clockwork.NewRealClock(), Metrics: m},
		Deps{Feed: store, State: store, Writer: store, Node: latencyCSI{}, Controller: latencyCSI{}, Modules: mods},
		hclog.NewNullLogger())
	start := time.Now()
	w.SetEnabled(true)
	<-m.done
	for w.feedIndex.Load() == 0 {
		<-time.After(time.Millisecond)
	}
	d := time.Since(start)
	waitIdle(b, w)
	w.SetEnabled(false)
	return d
}

// side is one configuration measured: native, or Wasm modules.
type side struct {
	name string
	mods Modules
}

// benchSides: native, the Go guest policy with the native adapter, both Go
// guests, and both AssemblyScript guests (abi/guest-as: the same decisions,
// no language runtime in the call).
func benchSides(b *testing.B) []side {
	policyOnly, both := benchWasmModules(b, "default-policy", "gcepd-adapter")
	_, asBoth := benchWasmModules(b, "as-default-policy", "as-gcepd-adapter")
	return []side{{"native", NativeModules()}, {"wasm-policy", policyOnly}, {"wasm-both", both}, {"as-both", asBoth}}
}

// measure runs every side b.N times, rotating which goes first, and
// reports each side's mean (unit) and its ratio to the native side's.
func measure(b *testing.B, sides []side, unit string, scale float64, run func(Modules) float64) {
	sums := make([]float64, len(sides))
	for i := range b.N {
		for j := range sides {
			k := (i + j) % len(sides)
			sums[k] += run(sides[k].mods)
		}
	}
	native := sums[0] / float64(b.N)
	for k, s := range sides {
		mean := sums[k] / float64(b.N)
		b.ReportMetric(mean*scale, s.name+"-"+unit)
		if k > 0 {
			b.ReportMetric(mean/native, s.name+"-ratio")
		}
	}
}

// BenchmarkWasmVsNativeReleaseThroughput: claims fully released per second
// (three CSI calls, three checkpoints, one policy decision and, in
// wasm-both, one adapter call each: gcepd-adapter declares only the
// controller steps; no CSI error to classify), by CSI latency and
// controller concurrency: no latency (the watcher's own cost, CPU-bound),
// 1 ms per call with 16 controller calls at once, and 10 ms with the
// default of one controller call per plugin (a fast real driver; cloud
// detaches take seconds).
func BenchmarkWasmVsNativeReleaseThroughput(b *testing.B) {
	sides := benchSides(b)
	for _, tc := range []struct {
		latency     time.Duration
		ctl, claims int
	}{
		{0, 16, 5000},
		{time.Millisecond, 16, 3000},
		{10 * time.Millisecond, 1, 200},
	} {
		b.Run(fmt.Sprintf("latency=%s/ctl=%d", tc.latency, tc.ctl), func(b *testing.B) {
			measure(b, sides, "claims/s", 1, func(m Modules) float64 {
				return runReleases(b, m, tc.claims, tc.ctl, tc.latency)
			})
		})
	}
}

// BenchmarkWasmVsNativeStepUp: leader step-up over 100,000 volumes of which
// 10,000 hold a releasable claim, until every releasable volume is assessed
// and released (one policy call per releasable volume, one adapter call per
// release in wasm-both; the others' claims are not due and ask no module).
func BenchmarkWasmVsNativeStepUp(b *testing.B) {
	sides := benchSides(b)
	const total, releasable = 100_000, 10_000
	measure(b, sides, "ms", 1000, func(m Modules) float64 {
		return runStepUp(b, m, total, releasable).Seconds()
	})
}
