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
		})
	}
}

// benchAgent is one side of BenchmarkAgentRelease: a dev agent, its
// scripted driver for plugin "gcepd" (the adapter module's plugin ID) and
// the batches it has released so far.
type benchAgent struct {
	name    string
	c       *client.Client
	drv     *csitest.Server
	batches int
}

func newBenchAgent(b *testing.B, name, moduleDir string, ctl int) *benchAgent {
	b.Helper()
	cfg := DefaultConfig()
	cfg.Dev = true
	cfg.BindAddr = "127.0.0.1:0"
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Watcher.ControllerConcurrency = ctl
	if moduleDir != "" {
		cfg.ModuleDir = moduleDir
		cfg.ModuleCacheDir = pluginstest.CacheDir()
	}
	a, err := New(cfg, Options{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: hclog.DefaultOutput})})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := a.Cluster.WaitForLeader(ctx); err != nil {
		b.Fatal(err)
	}
	if moduleDir != "" && len(a.Modules.Status()) != 2 {
		b.Fatalf("%s agent serves %d modules, want default-policy and gcepd-adapter", name, len(a.Modules.Status()))
	}
	c, err := client.New("http://"+a.HTTPAddr(), nil)
	if err != nil {
		b.Fatal(err)
	}
	drv := csitest.NewServer(b, csitest.Options{PublishUnpublish: true, StageUnstage: true})
	setupPlugins(b, c, map[string]*csitest.Server{"gcepd": drv})
	return &benchAgent{name: name, c: c, drv: drv}
}

// release claims n new volumes, ends their allocations and returns the
// claims released per second, timed from ending the allocations until a
// blocking query shows none of the batch's claims left. Until the driver
// has detached every volume of the batch the benchmark watches the driver
// in process rather than the API: listing every volume on each change
// would take the CPU the agents are measured on.
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
	start := time.Now()
	endAllocs(b, s.c, ids...)
	err := s.drv.WaitFor(ctx, func() bool {
		for _, id := range ids {
			if s.drv.Attached("disk-"+id, "ext-node1") {
				return false
			}
		}
		return true
	})
	if err != nil {
		b.Fatalf("%s: waiting for detaches: %v", s.name, err)
	}
	var index uint64
	for {
		list, meta, err := s.c.Volumes(ctx, "default", "gcepd", &client.QueryOptions{Index: index, Wait: 10 * time.Second})
		if err != nil {
			b.Fatalf("%s: waiting for releases: %v", s.name, err)
		}
		left := 0
		for _, v := range list {
			if _, ok := vols[v.ID]; ok {
				left += len(v.Claims)
			}
		}
		if left == 0 {
			return float64(n) / time.Since(start).Seconds()
		}
		index = meta.Index
	}
}
