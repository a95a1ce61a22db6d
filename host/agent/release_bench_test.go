package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// BenchmarkAgentRelease is the core issue's release-throughput benchmark on
// the whole host (HTTP API, raft log, go-memdb store, watcher, gRPC CSI
// clients) against the scripted CSI server over a unix socket, by
// controller concurrency, with two agents side by side: one on the native
// default policy and spec adapter, one serving the Wasm default-policy and
// gcepd-adapter modules (one policy call and one adapter call per release).
// Each iteration claims a fresh batch of volumes on each agent (untimed),
// ends their allocations and times until the last claim is gone; the sides
// take turns going first, and both agents run throughout, so machine noise
// hits them alike. A first, unmeasured batch warms both (module pools, Go
// heaps). Reported: claims/s per side and the ratio wasm/native (issue 4:
// at least 0.95).
//
//	go test -run '^$' -bench AgentRelease -benchtime 3x ./host/agent/
func BenchmarkAgentRelease(b *testing.B) {
	const claims = 1000
	for _, ctl := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("ctl=%d", ctl), func(b *testing.B) {
			modDir := b.TempDir()
			installModule(b, modDir, "default-policy", "default-policy", "bench/default-policy.hcl")
			installModule(b, modDir, "gcepd-adapter", "gcepd-adapter", "bench/gcepd-adapter.hcl")
			sides := []*benchAgent{newBenchAgent(b, "native", "", ctl), newBenchAgent(b, "wasm", modDir, ctl)}
			for _, s := range sides {
				s.release(b, claims) // warm-up
			}
			sums := make([]float64, len(sides))
			for i := range b.N {
				for j := range sides {
					k := (i + j) % len(sides)
					sums[k] += sides[k].release(b, claims)
				}
			}
			native := sums[0] / float64(b.N)
			b.ReportMetric(native, "native-claims/s")
			b.ReportMetric(sums[1]/float64(b.N), "wasm-claims/s")
			b.ReportMetric(sums[1]/sums[0], "wasm-ratio")
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
		b.Fatalf("%s agent serves %d modules, want default-policy and gcepd-adapter", name, len(a.Modules.Status()))
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
	b.Helper()
	s.batches++
	vols := make(map[string]string, n)
	ids := make([]string, 0, n)
	for i := range n {
		id := fmt.Sprintf("b%d-v%04d", s.batches, i)
		vols[id] = "gcepd"
		ids = append(ids, id)
	}
	claimVolumes(b, s.c, vols)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	index := s.a.Store.LatestIndex()
	start := time.Now()
	endAllocs(b, s.c, ids...)
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
	return float64(n) / time.Since(start).Seconds()
}
