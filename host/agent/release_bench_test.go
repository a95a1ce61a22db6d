package agent

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// BenchmarkAgentRelease is the release-throughput benchmark on
// the whole host (HTTP API, raft log, go-memdb store, watcher, gRPC CSI
// clients) against the scripted CSI server over a unix socket, by
// controller concurrency, with three agents side by side: one on the native
// default policy and spec adapter, "wasm" serving the Go guests
// default-policy and gcepd-adapter, "as" their AssemblyScript ports
// (abi/guest-as; one policy call and one adapter call per release either
// way). Each iteration claims a fresh batch of volumes on each agent
// (untimed), ends their allocations and times until the last claim is gone;
// the sides take turns going first, and all agents run throughout, so
// machine noise hits them alike. A first, unmeasured batch warms them all
// (module pools, Go heaps). Reported: claims/s per side and each Wasm
// side's ratio to native (BENCHMARKS.md's target: at least 0.95), and the Go guests'
// module calls per claim, claiming included.
//
//	go test -run '^$' -bench AgentRelease -benchtime 3x ./host/agent/
func BenchmarkAgentRelease(b *testing.B) {
	const claims = 1000
	for _, ctl := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("ctl=%d", ctl), func(b *testing.B) {
			goDir, asDir := b.TempDir(), b.TempDir()
			installModule(b, goDir, "default-policy", "default-policy", "bench/default-policy.hcl")
			installModule(b, goDir, "gcepd-adapter", "gcepd-adapter", "bench/gcepd-adapter.hcl")
			installModule(b, asDir, "as-default-policy", "as-default-policy", "bench/default-policy.hcl")
			installModule(b, asDir, "as-gcepd-adapter", "as-gcepd-adapter", "bench/gcepd-adapter.hcl")
			sides := []*benchAgent{newBenchAgent(b, "native", "", ctl), newBenchAgent(b, "wasm", goDir, ctl),
				newBenchAgent(b, "as", asDir, ctl)}
			for _, s := range sides {
				s.release(b, claims) // warm-up
			}
			sums := make([]float64, len(sides))
			rounds := make([][]float64, len(sides)) // claims/s by round
			cpu := make([]time.Duration, len(sides))
			for i := range b.N {
				for j := range sides {
					k := (i + j) % len(sides)
					r, c := sides[k].releaseCPU(b, claims)
					sums[k] += r
					rounds[k] = append(rounds[k], r)
					cpu[k] += c
				}
			}
			for k, s := range sides {
				b.ReportMetric(float64(cpu[k].Microseconds())/float64(b.N), s.name+"-cpu-us/claim")
			}
			b.ReportMetric(sums[0]/float64(b.N), "native-claims/s")
			for k := 1; k < len(sides); k++ {
				b.ReportMetric(sums[k]/float64(b.N), sides[k].name+"-claims/s")
				b.ReportMetric(sums[k]/sums[0], sides[k].name+"-ratio")
				// The median of the rounds' ratios: one round's burst of
				// machine noise moves the mean ratio, not the median.
				ratios := make([]float64, b.N)
				for i := range ratios {
					ratios[i] = rounds[k][i] / rounds[0][i]
				}
				slices.Sort(ratios)
				b.ReportMetric(ratios[len(ratios)/2], sides[k].name+"-ratio-median")
			}
			// Module calls per claim released, claiming included (the
			// adapter adapts ControllerPublish as well as Unpublish).
			var calls uint64
			for _, st := range sides[1].a.Modules.Status() {
				calls += st.Calls
			}
			b.ReportMetric(float64(calls)/float64(sides[1].batches*claims), "module-calls/claim")
		})
	}
}

// benchAgent is one side of BenchmarkAgentRelease: a dev agent, its
// scripted driver for plugin "gcepd" (the adapter module's plugin ID) and
// the batches it has released so far.
type benchAgent struct {
	name    string
	a       *Agent
	c       *client.Client
	batches int
	// The batch claimed and not yet released: volume ID -> plugin, IDs.
	vols map[string]string
	ids  []string
}

func newBenchAgent(b *testing.B, name, moduleDir string, ctl int) *benchAgent {
	b.Helper()
	cfg := localConfig()
	cfg.Watcher.ControllerConcurrency = ctl
	if moduleDir != "" {
		cfg.ModuleDir = moduleDir
		cfg.ModuleCacheDir = pluginstest.CacheDir()
	}
	a, c := startAgent(b, cfg, Options{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: hclog.DefaultOutput})})
	b.Cleanup(func() { _ = a.Shutdown() })
	if moduleDir != "" && len(a.Modules.Status()) != 2 {
		b.Fatalf("%s agent serves %d modules, want a policy and an adapter", name, len(a.Modules.Status()))
	}
	drv := csitest.NewServer(b, csitest.Options{PublishUnpublish: true, StageUnstage: true})
	setupPlugins(b, c, map[string]*csitest.Server{"gcepd": drv})
	return &benchAgent{name: name, a: a, c: c}
}

// release claims n new volumes, ends their allocations and returns the
// claims released per second, timed from ending the allocations until the
// store shows none of the batch's claims left. It follows the agent's store
// in process (the watcher's own feed, which copies only changed volumes):
// listing every volume through the API on each change cost the measured
// process more CPU the longer a side's last releases trailed, which
// penalised the slower side twice.
func (s *benchAgent) release(b *testing.B, n int) float64 {
	r, _ := s.releaseCPU(b, n)
	return r
}

// releaseCPU is release that also returns the process CPU time spent per
// claim over the timed part. The sides run one at a time, so that is (up to
// the idle agents' background work) this side's cost, and unlike the
// throughput it does not move when the machine's other tenants take the
// cores away.
func (s *benchAgent) releaseCPU(b *testing.B, n int) (claimsPerSec float64, cpuPerClaim time.Duration) {
	b.Helper()
	s.claimBatch(b, n)
	return s.releaseClaimed(b)
}

// claimBatch claims n new volumes (the untimed part of a batch).
func (s *benchAgent) claimBatch(b *testing.B, n int) {
	b.Helper()
	s.batches++
	s.vols = make(map[string]string, n)
	s.ids = make([]string, 0, n)
	for i := range n {
		id := fmt.Sprintf("b%d-v%04d", s.batches, i)
		s.vols[id] = "gcepd"
		s.ids = append(s.ids, id)
	}
	claimVolumes(b, s.c, s.vols)
}

// releaseClaimed ends the allocations of the batch claimBatch claimed and
// times until the store shows none of its claims left.
func (s *benchAgent) releaseClaimed(b *testing.B) (claimsPerSec float64, cpuPerClaim time.Duration) {
	b.Helper()
	vols, n := s.vols, len(s.ids)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	index := s.a.Store.LatestIndex()
	cpuSince := startCPU(b)
	start := time.Now()
	endAllocs(b, s.c, s.ids...)
	for len(vols) > 0 {
		changed, next, err := s.a.Store.VolumesChangedSince(ctx, index)
		if err != nil {
			b.Fatalf("%s: waiting for releases (%d left): %v", s.name, len(vols), err)
		}
		for _, v := range changed {
			if _, ok := vols[v.ID]; ok && len(v.Claims) == 0 {
				delete(vols, v.ID)
			}
		}
		index = next
	}
	elapsed, cpu := time.Since(start), cpuSince()
	return float64(n) / elapsed.Seconds(), cpu / time.Duration(n)
}

// startCPU starts timing the process's CPU on a fresh GC cycle (the
// agents share one Go heap: each timed part starts clear of the debt the
// part before it left) and returns the CPU used since.
func startCPU(b *testing.B) (since func() time.Duration) {
	runtime.GC()
	cpu0 := processCPU(b)
	return func() time.Duration { return processCPU(b) - cpu0 }
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
