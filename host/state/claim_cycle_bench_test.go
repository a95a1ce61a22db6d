package state

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// The claim cycle: every store call the claim path, the FSM and the
// watcher make for a claim and its release, on 2,000 unclaimed volumes of
// a store built by bulkLoad (a tenth of its volumes claimed, spread over
// the table), the claims on 4 nodes as in the scale run:
//
//   - the allocations upserted running, 1,000 per entry (the scale run's
//     PUT /v1/allocations);
//   - per claim, the server's reads (a snapshot, the volume, Validate of
//     the publishing record, the node, the plugin), the publishing record
//     applied, attachRecorded's read, the taken record applied;
//   - the allocations upserted complete, 1,000 per entry;
//   - the watcher's wake (the volumes modified since the previous write),
//     its reads per claim (volume, allocation, node, plugin), the batcher's
//     Validate of each checkpoint before the append, and the checkpoints
//     group-committed three per entry: node-detached, then
//     controller-detached freeing the claim.
//
// A cycle leaves the store's claims as it found them (its allocations
// stay, as they do in a server until their garbage collection), so rounds
// repeat on the same volumes.
const cycleClaims, cycleNodes = 2000, 4

// cycleStore is a bulk-loaded store and its next raft index.
type cycleStore struct {
	n   int
	s   *Store
	idx uint64
}

func newCycleStore(tb testing.TB, volumes int, opts ...Option) *cycleStore {
	s := bulkLoad(tb, scaleShape{volumes: volumes, claimed: volumes / 10}, opts...)
	return &cycleStore{n: volumes, s: s, idx: s.LatestIndex()}
}

func (cs *cycleStore) apply(tb testing.TB, t structs.MessageType, req any) uint64 {
	cs.idx++
	resp, err := cs.s.ApplyAt(cs.idx, t0, t, req)
	if err != nil {
		tb.Fatalf("%d volumes, type %d: %v", cs.n, t, err)
	}
	if errs, ok := resp.([]error); ok {
		for _, err := range errs {
			if err != nil {
				tb.Fatalf("%d volumes: %v", cs.n, err)
			}
		}
	}
	return cs.idx
}

// cycle claims and releases cycleClaims volumes; round names its allocations.
func (cs *cycleStore) cycle(tb testing.TB, round int) {
	s := cs.s
	// Volumes between the bulk claims (every tenth is claimed).
	volID := func(k int) string { return fmt.Sprintf("vol-%07d", k*(cs.n/cycleClaims)+1) }
	allocID := func(k int) string { return fmt.Sprintf("alloc-r%d-%05d", round, k) }
	nodeID := func(k int) string { return fmt.Sprintf("node-%03d", k%cycleNodes) }
	allocs := func(status structs.AllocClientStatus) {
		for i := 0; i < cycleClaims; i += 1000 {
			as := make([]*structs.Alloc, 0, 1000)
			for k := i; k < min(i+1000, cycleClaims); k++ {
				as = append(as, &structs.Alloc{ID: allocID(k), Namespace: "default", JobID: "job", NodeID: nodeID(k), ClientStatus: status})
			}
			cs.apply(tb, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: as})
		}
	}

	allocs(structs.AllocRunning)
	for k := range cycleClaims {
		snap := s.Snapshot()
		v, err := snap.VolumeByID(nil, "default", volID(k))
		if err != nil || v == nil {
			tb.Fatalf("volume %s: %v", volID(k), err)
		}
		c := &structs.Claim{AllocID: allocID(k), NodeID: nodeID(k), Mode: structs.ClaimWrite, State: structs.ClaimPublishing,
			AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode, CreateTime: t0, ModifyTime: t0}
		rec := &structs.VolumeClaimRequest{Namespace: v.Namespace, VolumeID: v.ID, Claim: c}
		if err := snap.Validate(structs.VolumeClaimType, rec); err != nil {
			tb.Fatal(err)
		}
		if n, _ := snap.NodeByID(nil, c.NodeID); n == nil {
			tb.Fatal("no node")
		}
		if p, _ := snap.PluginByID(nil, v.PluginID); p == nil {
			tb.Fatal("no plugin")
		}
		index := cs.apply(tb, structs.VolumeClaimType, rec)
		if v, _ := s.Snapshot().VolumeByID(nil, "default", volID(k)); v == nil || v.Claims[c.AllocID].ModifyIndex != index {
			tb.Fatal("publishing record not committed")
		}
		taken := c.Copy()
		taken.State = structs.ClaimTaken
		cs.apply(tb, structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: v.Namespace, VolumeID: v.ID, Claim: taken})
	}

	woken := cs.idx
	allocs(structs.AllocComplete)
	release := func(state structs.ClaimState) {
		if vols, err := s.Snapshot().VolumesModifiedSince(nil, woken); err != nil || len(vols) == 0 {
			tb.Fatalf("watcher wake: %d volumes: %v", len(vols), err)
		}
		woken = cs.idx
		r := s.Reader()
		var batch []*structs.ClaimCheckpointRequest
		for k := range cycleClaims {
			v, _ := r.Volume("default", volID(k))
			a, _ := r.Alloc(allocID(k))
			n, _ := r.Node(nodeID(k))
			p, _ := r.Plugin(v.PluginID)
			if a == nil || n == nil || p == nil {
				tb.Fatal("watcher reads")
			}
			ck := &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: v.ID, Claim: v.Claims[a.ID].Copy()}
			ck.Claim.State = state
			if state == structs.ClaimControllerDetached {
				ck.ControllerUnpublished, ck.Free = true, true
			}
			if err := s.Snapshot().Validate(structs.ClaimCheckpointType, ck); err != nil {
				tb.Fatal(err)
			}
			if batch = append(batch, ck); len(batch) == 3 || k == cycleClaims-1 {
				cs.apply(tb, structs.ClaimCheckpointBatchType, &structs.ClaimCheckpointBatchRequest{Checkpoints: batch})
				batch = nil
			}
		}
	}
	release(structs.ClaimNodeDetached)
	release(structs.ClaimControllerDetached)

	if st, _ := s.Snapshot().VolumeStats(); st.Claims[structs.ClaimTaken] != cs.n/10 {
		tb.Fatalf("%d volumes: %d claims taken after the cycle, want the bulk load's %d", cs.n, st.Claims[structs.ClaimTaken], cs.n/10)
	}
}

// cycleFig is one timed cycle, per claim: process CPU, the collector's
// share of it (runtime/metrics), bytes and objects allocated.
type cycleFig struct{ cpu, gc, bytes, objects float64 }

// timedCycle runs one cycle after a collection. With collectorOff the
// collector does not run in it. profile, when set, names the CPU profile
// file to write.
func (cs *cycleStore) timedCycle(tb testing.TB, round int, collectorOff bool, profile string) cycleFig {
	// A collection, and the freed memory returned to the system, so every
	// cycle starts alike: under a limit, memory the previous cycle freed
	// but the runtime still holds would count against it.
	debug.FreeOSMemory()
	if collectorOff {
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			tb.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			tb.Fatal(err)
		}
	}
	gc0, cpu0 := gcCPU(), rusageCPU(tb)
	cs.cycle(tb, round)
	cpu, gc := rusageCPU(tb)-cpu0, gcCPU()-gc0
	if profile != "" {
		pprof.StopCPUProfile()
	}
	runtime.ReadMemStats(&m1)
	return cycleFig{cpu: float64(cpu.Nanoseconds()) / 1e3 / cycleClaims, gc: gc * 1e6 / cycleClaims,
		bytes: float64(m1.TotalAlloc-m0.TotalAlloc) / cycleClaims, objects: float64(m1.Mallocs-m0.Mallocs) / cycleClaims}
}

// gcCPU is the collector's CPU so far, in seconds (an estimate the runtime
// keeps, updated at each cycle's end).
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
}

// reportCycles logs and reports each figure of sides a and b (named by
// their labels), medians over the rounds [min-max], and the median of the
// per-round ratio b / a.
func reportCycles(b *testing.B, la, lb string, a, c []cycleFig, withGC bool) {
	figs := []struct {
		name string
		get  func(cycleFig) float64
	}{
		{"cpu-us/claim", func(f cycleFig) float64 { return f.cpu }},
		{"alloc-B/claim", func(f cycleFig) float64 { return f.bytes }},
		{"allocs/claim", func(f cycleFig) float64 { return f.objects }},
	}
	if withGC {
		figs = append(figs, struct {
			name string
			get  func(cycleFig) float64
		}{"gc-cpu-us/claim", func(f cycleFig) float64 { return f.gc }})
	}
	for _, m := range figs {
		var x, y []float64
		for i := range a {
			x, y = append(x, m.get(a[i])), append(y, m.get(c[i]))
		}
		b.Logf("%s: %s %s, %s %s, %s/%s per round %s", m.name, la, testutil.SpreadOf(x), lb, testutil.SpreadOf(y), lb, la, testutil.SpreadOf(testutil.Ratios(y, x)))
		b.ReportMetric(testutil.SpreadOf(x).Median, la+"-"+m.name)
		b.ReportMetric(testutil.SpreadOf(y).Median, lb+"-"+m.name)
		b.ReportMetric(testutil.SpreadOf(testutil.Ratios(y, x)).Median, "ratio-"+m.name)
	}
}

// BenchmarkClaimCycleBySize: what the store costs one claim and its
// release (the claim cycle above) at two table sizes in one process,
// rounds alternating between them, so the ratio says whether a claim's
// cost grows with the table (claims through raft fell from 138/s at
// 200,000 volumes to 45/s at 1,000,000). Reported per claim and size:
// process CPU with the collector off (with both stores in one heap its
// cycles would land in whichever side crossed the next goal; what a
// server's collector spends per claim follows the bytes allocated, and
// BenchmarkClaimCycleUnderLimit measures it), bytes and objects
// allocated: medians of 5 rounds [min-max] and the median of the per-round
// ratio large / small. VOLHOST_CYCLE_SIZES=a,b sets the sizes
// (20000,200000); VOLHOST_CYCLE_PROFILE=DIR writes a CPU profile of each
// size's timed cycle (cpu-N-rR.prof) and the first round's allocations
// (allocs-N.prof against allocs-N-base.prof), for `go tool pprof
// -diff_base`.
//
//	go test -run '^$' -bench '^BenchmarkClaimCycleBySize$' -benchtime 1x -timeout 30m ./host/state/
func BenchmarkClaimCycleBySize(b *testing.B) {
	sizes := []int{20_000, 200_000}
	if v := os.Getenv("VOLHOST_CYCLE_SIZES"); v != "" {
		sizes = sizes[:0]
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 20_000 {
				b.Fatalf("VOLHOST_CYCLE_SIZES=%q: want volumes >= 20000", v)
			}
			sizes = append(sizes, n)
		}
	}
	if len(sizes) != 2 {
		b.Fatalf("want two sizes, got %v", sizes)
	}
	const rounds = 5
	profDir := os.Getenv("VOLHOST_CYCLE_PROFILE")
	for range b.N {
		stores := []*cycleStore{newCycleStore(b, sizes[0]), newCycleStore(b, sizes[1])}
		figs := make([][]cycleFig, 2)
		for r := range rounds {
			for i, cs := range stores {
				profile := ""
				if profDir != "" {
					profile = filepath.Join(profDir, fmt.Sprintf("cpu-%d-r%d.prof", cs.n, r))
					if r == 0 {
						writeAllocs(b, filepath.Join(profDir, fmt.Sprintf("allocs-%d-base.prof", cs.n)))
					}
				}
				figs[i] = append(figs[i], cs.timedCycle(b, r, true, profile))
				if profDir != "" && r == 0 {
					writeAllocs(b, filepath.Join(profDir, fmt.Sprintf("allocs-%d.prof", cs.n)))
				}
			}
		}
		reportCycles(b, fmt.Sprintf("%dk", sizes[0]/1000), fmt.Sprintf("%dk", sizes[1]/1000), figs[0], figs[1], false)
	}
}

// BenchmarkClaimCycleUnderLimit: the claim cycle with the collector on,
// without a memory limit (GOGC=100: the next collection when the heap has
// doubled) against under a soft limit of the live heap and a quarter (the
// agent's default once the state outgrows its budget, as at 1,000,000
// volumes: the next collection when the heap has grown by a quarter),
// rounds alternating on one store. The collector's CPU per claim follows
// the bytes a claim allocates divided by the heap's room to grow, so a
// limit that binds multiplies it whatever the table's size; this
// measures by how much. VOLHOST_CYCLE_VOLUMES sets the store's size
// (200000), VOLHOST_CYCLE_LIMIT the limit's factor of the live heap
// (1.25). The collector's own figure (gc-cpu-us/claim, runtime/metrics)
// is the runtime's estimate, idle-time marking included: read the
// process CPU.
//
//	go test -run '^$' -bench '^BenchmarkClaimCycleUnderLimit$' -benchtime 1x -timeout 30m ./host/state/
func BenchmarkClaimCycleUnderLimit(b *testing.B) {
	n := testutil.EnvInt(b, "VOLHOST_CYCLE_VOLUMES", 200_000, 1)
	factor := 1.25
	if v := os.Getenv("VOLHOST_CYCLE_LIMIT"); v != "" {
		var err error
		if factor, err = strconv.ParseFloat(v, 64); err != nil || factor <= 1 {
			b.Fatalf("VOLHOST_CYCLE_LIMIT=%q: want a factor of the live heap > 1", v)
		}
	}
	const rounds = 5
	for range b.N {
		cs := newCycleStore(b, n)
		var free, bound []cycleFig
		round := 0
		testutil.Interleave(rounds,
			func() float64 {
				defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
				f := cs.timedCycle(b, round, false, "")
				free = append(free, f)
				round++
				return f.cpu
			},
			func() float64 {
				runtime.GC()
				live := liveHeap()
				defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(float64(live) * factor)))
				f := cs.timedCycle(b, round, false, "")
				bound = append(bound, f)
				round++
				return f.cpu
			})
		b.Logf("%d volumes, live heap after a collection %.0f MiB", n, float64(liveHeap())/(1<<20))
		reportCycles(b, "gogc100", fmt.Sprintf("limit%.2f", factor), free, bound, true)
	}
}

// BenchmarkClaimCycleEventsCap: the claim cycle with the collector off on
// two stores of the same size, the default event retention against a
// cap on all volumes' events (MaxVolumeEvents) that the store is past,
// rounds alternating. Past the cap every volume event written deletes the
// oldest one: a claim and its release write five, so a 1,000,000-volume
// run's 100,000 claims (500,000 events against the default 200,000) pay
// the trim that a 100,000-volume run's 10,000 never reach. This measures
// what it adds to a claim. VOLHOST_CYCLE_VOLUMES sets the size (200000).
//
//	go test -run '^$' -bench '^BenchmarkClaimCycleEventsCap$' -benchtime 1x -timeout 30m ./host/state/
func BenchmarkClaimCycleEventsCap(b *testing.B) {
	n := testutil.EnvInt(b, "VOLHOST_CYCLE_VOLUMES", 200_000, 1)
	const rounds = 5
	for range b.N {
		// The bulk load writes one event per claim (n/10): a cap of a
		// twentieth of the volumes is passed before the first cycle.
		capped := newCycleStore(b, n, WithEventRetention(EventRetention{MaxVolumeEvents: n / 20}))
		free := newCycleStore(b, n)
		var a, c []cycleFig
		for r := range rounds {
			a = append(a, free.timedCycle(b, r, true, ""))
			c = append(c, capped.timedCycle(b, r, true, ""))
		}
		if got, max := capped.s.events.volEvents, n/20; got > max || got < max-volumeTrimBatch(max) {
			b.Fatalf("capped store holds %d volume events, want its cap %d less at most a trim's batch", got, max)
		}
		reportCycles(b, "uncapped", "capped", a, c, false)
	}
}

// liveHeap is the heap marked live by the last collection.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// writeAllocs writes the allocation profile so far (every allocation since
// the process began, sampled), for a diff against an earlier one.
func writeAllocs(tb testing.TB, path string) {
	runtime.GC() // the profile counts what the last completed cycle saw
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
}
