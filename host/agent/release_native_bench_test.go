package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/nodestep"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/watcher"
)

// BenchmarkAgentReleaseNative is BENCHMARKS.md's "whole-host release CPU
// per claim" on one agent alone: BenchmarkAgentRelease's native side without
// the two Wasm agents beside it, so the process CPU over a timed batch is
// this agent's release and nothing idle next to it. One batch of 1,000
// claims per iteration (claiming untimed, a GC before the timed part) at
// controller concurrency 16; the first batch warms up, unmeasured.
//
// Reported: the median, min and max over the iterations of the process CPU
// per claim (cpu-us/claim...), the raft entries appended per claim
// released (raft-entries/claim: the group commit's effect), the bytes and
// objects the timed part allocated per claim (alloc-B/claim, allocs/claim:
// unlike CPU time, they do not move with the machine's load) and the
// throughput.
//
// Each iteration also runs the release's external work alone
// (releaseFloor: the same node steps and driver calls for as many claims,
// with no store, raft or watcher) and reports its CPU per claim
// (floor-cpu-us/claim), the whole release's CPU less it, per iteration
// (host-share-cpu-us/claim), and their ratio (floor-share). The floor is
// work this benchmark's one process pays that a deployment pays in the
// driver's process and on the node: the whole-host target (BENCHMARKS.md)
// cannot be below it.
//
// VOLHOST_RELEASE_CPUPROFILE=FILE writes a CPU profile of each timed part,
// not of the claiming (FILE.0, FILE.1, ...; `go tool pprof` merges them),
// and allocation profiles at both ends of each (startProfile). Goroutine
// labels separate the host ("side=host": HTTP, raft, store, watcher, gRPC
// clients) from the scripted CSI driver's gRPC server
// ("side=csi-driver"), which a real deployment runs in another process;
// the Go runtime's GC workers carry no label.
// It cannot be combined with -cpuprofile.
//
//	go test -run '^$' -bench '^BenchmarkAgentReleaseNative$' -benchtime 5x ./host/agent/
//	go tool pprof -tags FILE.*   # CPU by side
func BenchmarkAgentReleaseNative(b *testing.B) {
	const claims = 1000
	var s *benchAgent
	pprof.Do(context.Background(), pprof.Labels("side", "host"), func(context.Context) {
		cfg := localConfig()
		cfg.Watcher.ControllerConcurrency = 16
		a, c := startAgent(b, cfg, Options{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: hclog.DefaultOutput})})
		b.Cleanup(func() { _ = a.Shutdown() })
		s = &benchAgent{name: "native", a: a, c: c}
	})
	var drv *csitest.Server
	pprof.Do(context.Background(), pprof.Labels("side", "csi-driver"), func(context.Context) {
		drv = csitest.NewServer(b, csitest.Options{PublishUnpublish: true, StageUnstage: true})
	})
	setupPlugins(b, s.c, map[string]*csitest.Server{"gcepd": drv})
	s.release(b, claims) // warm-up

	floorRoot := b.TempDir()
	profile := os.Getenv("VOLHOST_RELEASE_CPUPROFILE")
	var cpus, rates, entries, bytes, objects, floors, shares, floorShares []float64
	var m0, m1 runtime.MemStats
	for i := range b.N {
		s.claimBatch(b, claims)
		first := s.a.Cluster.LastIndex()
		stop := startProfile(b, profile, i)
		runtime.ReadMemStats(&m0)
		r, c := s.releaseClaimed(b)
		runtime.ReadMemStats(&m1)
		stop()
		cpus = append(cpus, float64(c.Nanoseconds())/1e3)
		rates = append(rates, r)
		entries = append(entries, float64(s.a.Cluster.LastIndex()-first)/claims)
		// What the timed part allocated: unlike CPU time, it does not
		// move with the machine's load.
		bytes = append(bytes, float64(m1.TotalAlloc-m0.TotalAlloc)/claims)
		objects = append(objects, float64(m1.Mallocs-m0.Mallocs)/claims)

		floor := releaseFloor(b, s.a.CSI, drv.Endpoint(), floorRoot, i, claims)
		us := float64(floor.Nanoseconds()) / 1e3
		floors = append(floors, us)
		shares = append(shares, cpus[i]-us)
		floorShares = append(floorShares, us/cpus[i])
	}
	testutil.ReportSpread(b, cpus, "cpu-us/claim")
	testutil.ReportSpread(b, floors, "floor-cpu-us/claim")
	testutil.ReportSpread(b, shares, "host-share-cpu-us/claim")
	testutil.ReportSpread(b, floorShares, "floor-share")
	testutil.ReportSpread(b, rates, "claims/s")
	testutil.ReportSpread(b, entries, "raft-entries/claim")
	testutil.ReportSpread(b, bytes, "alloc-B/claim")
	testutil.ReportSpread(b, objects, "allocs/claim")
}

// startProfile starts a CPU profile into path.i when path is set and
// returns what stops it. It also writes the allocation profile at both
// ends (path-allocs.i.start, path-allocs.i.end), so that
// `go tool pprof -sample_index=alloc_space -diff_base START END` shows
// what the timed part allocated.
func startProfile(b *testing.B, path string, i int) (stop func()) {
	if path == "" {
		return func() {}
	}
	allocs := fmt.Sprintf("%s-allocs.%d", path, i)
	writeAllocs(b, allocs+".start")
	f, err := os.Create(fmt.Sprintf("%s.%d", path, i))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
		writeAllocs(b, allocs+".end")
	}
}

// writeAllocs writes the allocation profile after a GC: the profile is as
// of the last completed cycle.
func writeAllocs(b *testing.B, path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// releaseFloor times the release's external work alone for n claims and
// returns the process CPU per claim: per claim what the watcher asks of the
// node and the driver, NodeUnpublishVolume and NodeUnstageVolume through
// the direct-mode node steps (nodestep.Executor, with their directory
// removal, as the agent wires them) and ControllerUnpublishVolume, on the
// agent's own CSI client against the same scripted driver, as many claims
// at once as the watcher works on (MaxConcurrency), with no store, raft or
// watcher. The volumes are staged and published the same way first, in
// the host/csi.Paths layout under root, untimed.
func releaseFloor(b *testing.B, client *csi.Client, endpoint, root string, batch, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	steps := &nodestep.Executor{CSI: client}
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	type claim struct{ vol, staging, target string }
	claims := make([]claim, n)
	for i := range claims {
		vol := fmt.Sprintf("floor%d-v%04d", batch, i)
		staging, target := csi.Paths(root, "gcepd", "default", vol, "a-"+vol)
		claims[i] = claim{vol: "disk-" + vol, staging: staging, target: target}
	}
	err := testutil.FanOut(watcher.DefaultMaxConcurrency, n, func(i int) error {
		c := claims[i]
		if err := steps.NodeStageVolume(ctx, endpoint, &csipb.NodeStageVolumeRequest{
			VolumeId: c.vol, StagingTargetPath: c.staging, VolumeCapability: capability}); err != nil {
			return err
		}
		return steps.NodePublishVolume(ctx, endpoint, &csipb.NodePublishVolumeRequest{
			VolumeId: c.vol, StagingTargetPath: c.staging, TargetPath: c.target, VolumeCapability: capability})
	})
	if err != nil {
		b.Fatalf("floor: publishing: %v", err)
	}
	cpuSince := startCPU(b) // as the whole release's timing starts
	err = testutil.FanOut(watcher.DefaultMaxConcurrency, n, func(i int) error {
		c := claims[i]
		if err := steps.NodeUnpublishVolume(ctx, endpoint, &csipb.NodeUnpublishVolumeRequest{
			VolumeId: c.vol, TargetPath: c.target}); err != nil {
			return err
		}
		if err := steps.NodeUnstageVolume(ctx, endpoint, &csipb.NodeUnstageVolumeRequest{
			VolumeId: c.vol, StagingTargetPath: c.staging}); err != nil {
			return err
		}
		return client.ControllerUnpublishVolume(ctx, endpoint, &csipb.ControllerUnpublishVolumeRequest{
			VolumeId: c.vol, NodeId: "node1"})
	})
	cpu := cpuSince()
	if err != nil {
		b.Fatalf("floor: releasing: %v", err)
	}
	// Everything the steps created is gone again, as after the release.
	if left, _ := os.ReadDir(filepath.Join(root, "csi", "gcepd", "per-alloc")); len(left) > 0 {
		b.Fatalf("floor: %d per-allocation directories left", len(left))
	}
	return cpu / time.Duration(n)
}
