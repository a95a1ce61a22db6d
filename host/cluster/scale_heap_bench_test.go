package cluster

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// scaleHeapKeep holds BenchmarkScaleHeap's last state until the process
// ends, so `-memprofile` (written at exit) shows it in use.
var scaleHeapKeep *fsm

// BenchmarkScaleHeap: the memory a server's state takes when it is built
// the way raft builds it, not restored: every request encoded as a log
// entry (encodeCommand) and applied by the FSM (decoded, term-fenced,
// validated and applied), so every string is the decoder's own, as on a
// server. VOLHOST_SCALE_VOLUMES volumes (default 200,000) registered 1,000
// per entry, a tenth of them claimed by as many running allocations
// (upserted 1,000 per entry) as the claim path writes them: a publishing
// record, then the claim taken, one entry each. Reported after a GC: the
// live heap (runtime/metrics /gc/heap/live:bytes), the heap in use, the
// RSS, and the live bytes and heap objects per volume and per claim (its
// allocation included); and over the whole build the peak RSS (VmHWM),
// its time and the CPU the collector took. Under GOMEMLIMIT=2GiB the
// peak is what the agent's default limit (host/agent memlimit.go) holds
// a server of this state to.
//
//	VOLHOST_SCALE_VOLUMES=200000 go test -run '^$' -bench '^BenchmarkScaleHeap$' -benchtime 1x \
//	  -memprofile /tmp/heap.prof ./host/cluster/
//	go tool pprof -top -sample_index=inuse_space /tmp/heap.prof
func BenchmarkScaleHeap(b *testing.B) {
	n := 200_000
	if v := os.Getenv("VOLHOST_SCALE_VOLUMES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("VOLHOST_SCALE_VOLUMES=%q: want an integer >= 1000", v)
		}
	}
	claims := n / 10
	for b.Loop() {
		scaleHeapKeep = nil
		base := liveHeap()
		f, start := &fsm{store: state.NewStore(), meta: newMeta(), logger: hclog.NewNullLogger()}, time.Now()
		afterVolumes := buildScaleState(b, f, n, claims)
		took := time.Since(start)
		scaleHeapKeep = f
		all := liveHeap()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		perVolume := float64(afterVolumes.bytes-base.bytes) / float64(n)
		perClaim := float64(all.bytes-afterVolumes.bytes) / float64(claims)
		b.ReportMetric(float64(all.bytes)/(1<<20), "live-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
		b.ReportMetric(testutil.RSSMiB(), "rss-MiB")
		b.ReportMetric(perVolume, "B/volume")
		b.ReportMetric(perClaim, "B/claim")
		b.ReportMetric(peakRSSMiB(), "peak-rss-MiB")
		b.ReportMetric(took.Seconds(), "build-s")
		b.ReportMetric(gcCPUSeconds(), "gc-cpu-s")
		b.ReportMetric(float64(afterVolumes.objects-base.objects)/float64(n), "objects/volume")
		b.ReportMetric(float64(all.objects-afterVolumes.objects)/float64(claims), "objects/claim")
		b.Logf("%d volumes, %d claims applied through the FSM in %.1f s: live heap %.0f MiB (%.0f B/volume, %.0f B/claim), heap in use %.0f MiB, RSS %.0f MiB",
			n, claims, took.Seconds(), float64(all.bytes)/(1<<20), perVolume, perClaim, float64(ms.HeapInuse)/(1<<20), testutil.RSSMiB())
	}
}

// peakRSSMiB is the process's peak resident memory (VmHWM) in MiB.
func peakRSSMiB() float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// gcCPUSeconds is the CPU the collector has taken so far, by the runtime's
// estimate.
func gcCPUSeconds() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
}

// heapFigures is the live heap, in bytes and objects, after a GC.
type heapFigures struct{ bytes, objects uint64 }

// liveHeap collects, returns what it freed to the OS, and reads what the
// collection found live.
func liveHeap() heapFigures {
	debug.FreeOSMemory()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/objects:objects"}}
	metrics.Read(s)
	return heapFigures{bytes: s[0].Value.Uint64(), objects: s[1].Value.Uint64()}
}

// buildScaleState applies, through f, a plugin, 100 nodes, volumes
// volumes and claims claims (on every tenth volume) as a cluster's
// leader would write them, and answers the live heap once the volumes
// were in.
func buildScaleState(tb testing.TB, f *fsm, volumes, claims int) (afterVolumes heapFigures) {
	tb.Helper()
	const batch, nodes, term = 1000, 100, 1
	idx := uint64(0)
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	apply := func(t structs.MessageType, req any) {
		data, err := encodeCommand(t, at, req)
		if err != nil {
			tb.Fatal(err)
		}
		idx++
		if r, ok := f.Apply(&raft.Log{Index: idx, Term: term, Type: raft.LogCommand, Data: data}).(fsmResult); !ok || r.err != nil {
			tb.Fatalf("entry %d (type %d): %v", idx, t, r.err)
		}
	}
	apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "mock", ControllerEndpoint: "tcp://127.0.0.1:9000",
		Capabilities: structs.ControllerCapabilities{PublishUnpublish: true}}})
	nodeID := func(i int) string { return fmt.Sprintf("node-%d", i%nodes) }
	for i := range nodes {
		apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: nodeID(i), Status: structs.NodeReady, LastSeen: at,
			RootDir: "/var/lib/volhost/" + nodeID(i),
			Plugins: map[string]*structs.NodePlugin{"mock": {PluginID: "mock", Endpoint: "unix:///run/csi.sock", ExternalNodeID: "i-" + nodeID(i), StageUnstage: true}}}})
	}
	for i := 0; i < volumes; i += batch {
		vols := make([]*structs.Volume, 0, batch)
		for j := i; j < min(i+batch, volumes); j++ {
			vols = append(vols, &structs.Volume{Namespace: "default", ID: fmt.Sprintf("vol-%07d", j), ExternalID: fmt.Sprintf("mock-vol-%d", j),
				PluginID: "mock", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
		}
		apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
	}
	afterVolumes = liveHeap()
	for i := 0; i < claims; i += batch {
		as := make([]*structs.Alloc, 0, batch)
		for j := i; j < min(i+batch, claims); j++ {
			as = append(as, &structs.Alloc{ID: fmt.Sprintf("alloc-%07d", j), Namespace: "default", JobID: "scale", NodeID: nodeID(j), ClientStatus: structs.AllocRunning})
		}
		apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: as})
	}
	stride := volumes / max(claims, 1)
	for j := range claims {
		vol, alloc := fmt.Sprintf("vol-%07d", j*stride), fmt.Sprintf("alloc-%07d", j)
		staging, target := csi.Paths("/var/lib/volhost/"+nodeID(j), "mock", "default", vol, alloc)
		c := &structs.Claim{AllocID: alloc, NodeID: nodeID(j), Mode: structs.ClaimWrite, AccessMode: structs.AccessSingleNodeWriter,
			AttachmentMode: structs.AttachFilesystem, State: structs.ClaimPublishing, CreateTime: at, ModifyTime: at,
			ExternalNodeID: "i-" + nodeID(j), StagingPath: staging, TargetPath: target}
		apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: vol, Claim: c, Term: term})
		taken := c.Copy()
		taken.State = structs.ClaimTaken
		apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: vol, Claim: taken, Term: term})
	}
	return afterVolumes
}

// BenchmarkCollectionByLayout: what one collection of a server's state
// costs when the state was built the way raft builds it (every volume
// and claim applied through the FSM: BenchmarkScaleHeap's buildScaleState)
// against the same rows restored from that state's snapshot, as a
// restarted server holds them. The live bytes and objects are the same;
// the layout is not: applies copy radix paths at every write and leave
// each volume's nodes wherever the heap had room, a restore inserts in key
// order into a fresh heap. Reported: the process CPU of one forced
// collection, the median of 5 per layout [min-max in the log], the
// applied one first (the restored state needs the applied one dropped
// first: both live at once would be marked together), and their ratio;
// the live heap, the heap in use (spans holding live objects) and
// objects of each. VOLHOST_LAYOUT_CLAIMS sets the claims (default a
// tenth of the volumes), VOLHOST_LAYOUT_MAX_EVENTS the store's
// max_volume_events (default the store's), to see what the layout's
// cost comes from.
//
//	VOLHOST_SCALE_VOLUMES=1000000 go test -run '^$' -bench '^BenchmarkCollectionByLayout$' -benchtime 1x -timeout 30m ./host/cluster/
func BenchmarkCollectionByLayout(b *testing.B) {
	n := testutil.EnvInt(b, "VOLHOST_SCALE_VOLUMES", 200_000, 1000)
	claims := testutil.EnvInt(b, "VOLHOST_LAYOUT_CLAIMS", n/10, 0)
	var opts []state.Option
	if m := testutil.EnvInt(b, "VOLHOST_LAYOUT_MAX_EVENTS", 0, 0); m > 0 {
		opts = append(opts, state.WithEventRetention(state.EventRetention{MaxVolumeEvents: m}))
	}
	collections := func(label string) float64 {
		cpu := make([]float64, 5)
		for i := range cpu {
			c0 := processCPU(b)
			runtime.GC()
			cpu[i] = (processCPU(b) - c0).Seconds()
		}
		h := liveHeap()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		sorted := slices.Clone(cpu)
		slices.Sort(sorted)
		b.Logf("%s: one collection %.3f s of CPU [%.3f-%.3f], live %d MiB, in use %d MiB, %d objects",
			label, sorted[2], sorted[0], sorted[4], h.bytes>>20, ms.HeapInuse>>20, h.objects)
		b.ReportMetric(float64(h.bytes)/(1<<20), label+"-live-MiB")
		return sorted[2]
	}
	for b.Loop() {
		f := &fsm{store: state.NewStore(opts...), meta: newMeta(), logger: hclog.NewNullLogger()}
		buildScaleState(b, f, n, claims)
		applied := collections("applied")
		var buf bytes.Buffer
		if err := f.store.Persist(&buf); err != nil {
			b.Fatal(err)
		}
		f = nil
		s := state.NewStore(opts...)
		if err := s.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
		buf = bytes.Buffer{}
		restored := collections("restored")
		runtime.KeepAlive(s)
		b.ReportMetric(applied, "applied-gc-cpu-s")
		b.ReportMetric(restored, "restored-gc-cpu-s")
		b.ReportMetric(applied/restored, "applied/restored")
	}
}
