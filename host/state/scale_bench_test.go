package state

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// scaleShape is the shape of the scale targets (BENCHMARKS.md): volumes, a tenth of them
// claimed, a tenth of those releasable (the claim's alloc has completed).
type scaleShape struct{ volumes, claimed, releasable int }

func shapeOf(volumes int) scaleShape {
	return scaleShape{volumes: volumes, claimed: volumes / 10, releasable: volumes / 100}
}

// bulkLoad builds shape in a new store through the FSM's write path
// (ApplyAt, every request validated as a raft entry would be), in large
// entries where the request type allows it: volumes and allocations 10,000
// per entry, one claim per entry (claims have no batch request). No HTTP,
// no raft: what is measured afterwards is the store.
func bulkLoad(tb testing.TB, shape scaleShape, opts ...Option) *Store {
	tb.Helper()
	s := NewStore(opts...)
	idx := uint64(0)
	apply := func(t structs.MessageType, req any) {
		idx++
		if _, err := s.ApplyAt(idx, t0, t, req); err != nil {
			tb.Fatalf("bulk load, entry %d (type %d): %v", idx, t, err)
		}
	}
	const batch, nodes = 1000, 100
	apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "ebs", Provider: "ebs.csi.example", ControllerEndpoint: "tcp://127.0.0.1:9000",
		Capabilities: structs.ControllerCapabilities{PublishUnpublish: true}}})
	for n := range nodes {
		id := fmt.Sprintf("node-%03d", n)
		apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: id, Status: structs.NodeReady, LastSeen: t0,
			Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix:///run/csi.sock", ExternalNodeID: "i-" + id}}}})
	}
	for i := 0; i < shape.volumes; i += batch {
		vols := make([]*structs.Volume, 0, batch)
		for j := i; j < min(i+batch, shape.volumes); j++ {
			vols = append(vols, &structs.Volume{Namespace: "default", ID: fmt.Sprintf("vol-%07d", j), ExternalID: fmt.Sprintf("disk-%07d", j),
				PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
		}
		apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
	}
	allocs := func(from, to int, status structs.AllocClientStatus) {
		for i := from; i < to; i += batch {
			as := make([]*structs.Alloc, 0, batch)
			for j := i; j < min(i+batch, to); j++ {
				as = append(as, &structs.Alloc{ID: fmt.Sprintf("alloc-%07d", j), Namespace: "default", JobID: "job",
					NodeID: fmt.Sprintf("node-%03d", j%nodes), ClientStatus: status})
			}
			apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: as})
		}
	}
	allocs(0, shape.claimed, structs.AllocRunning)
	// Claimed volumes are spread over the table (every tenth), as they
	// would be in a real cluster.
	stride := shape.volumes / max(shape.claimed, 1)
	for j := range shape.claimed {
		apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: fmt.Sprintf("vol-%07d", j*stride),
			Claim: &structs.Claim{AllocID: fmt.Sprintf("alloc-%07d", j), NodeID: fmt.Sprintf("node-%03d", j%nodes), Mode: structs.ClaimWrite}})
	}
	allocs(0, shape.releasable, structs.AllocComplete)
	return s
}

// BenchmarkScale: a store of VOLHOST_SCALE_VOLUMES volumes
// (default 1,000,000; a tenth claimed, a hundredth releasable) built by
// bulk FSM apply, then what a server does with it, each timed as the
// median of 5 runs (min-max beside it): save and restore a snapshot
// (Persist to a file, Restore from it), a 1,000-volume list page read
// from the ID index and, for comparison, cut from a scan of every volume
// (how the HTTP list route read it before the paged read), the counts a metrics scrape reads and the scan they replace, the
// volume counts of GET /v1/stats and the scan they replace, the
// releasable volumes step-up visits, and the volumes changed since a
// write (what a blocking query wakes). Heap and RSS after a GC.
//
//	go test -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 30m ./host/state/
//
// VOLHOST_SCALE_SNAPSHOT=FILE keeps the snapshot file there, for
// BenchmarkScaleRestored. VOLHOST_SCALE_OUT=FILE writes the table as markdown and
// VOLHOST_SCALE_JSON=FILE the medians, for make bench. Save and restore
// run 3 times rather than 5 from 500,000 volumes on (each takes tens of
// seconds there).
func BenchmarkScale(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("VOLHOST_SCALE_VOLUMES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("VOLHOST_SCALE_VOLUMES=%q: want an integer >= 1000", v)
		}
	}
	shape := shapeOf(n)
	for b.Loop() {
		start := time.Now()
		s := bulkLoad(b, shape)
		build := time.Since(start)
		heap, rss := memoryNow()
		rows := []scaleRow{{"build-s", "bulk FSM apply of the whole state (s)", []float64{build.Seconds()}}}
		rows = append(rows, scaleRow{"heap-MiB", "Go heap in use after GC (MiB)", []float64{heap}},
			scaleRow{"rss-MiB", "process RSS after GC and FreeOSMemory, the test binary included (MiB; bound 2048)", []float64{rss}})

		path := filepath.Join(b.TempDir(), "state.snap")
		if keep := os.Getenv("VOLHOST_SCALE_SNAPSHOT"); keep != "" {
			path = keep
		}
		var size int64
		reps := 5
		if n >= 500_000 {
			reps = 3
		}
		rows = append(rows, timed("save-s", "snapshot save: Persist to a file (s; bound 15)", reps, time.Second, func() {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			w := bufio.NewWriterSize(f, 1<<20)
			if err := s.Persist(w); err != nil {
				b.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			if st, err := f.Stat(); err == nil {
				size = st.Size()
			}
			f.Close()
		}))
		var restored *Store
		rows = append(rows, timed("restore-s", "snapshot restore: Restore from the file (s; bound 15)", reps, time.Second, func() {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			restored = NewStore()
			if err := restored.Restore(f); err != nil {
				b.Fatal(err)
			}
		}))
		if a, _ := s.Snapshot().VolumeStats(); a.Volumes != n {
			b.Fatalf("%d volumes counted, %d loaded", a.Volumes, n)
		}
		if r, _ := restored.Snapshot().VolumeStats(); r.Volumes != n {
			b.Fatalf("restored store counts %d volumes, want %d", r.Volumes, n)
		}
		snap := s.Snapshot()
		mid := fmt.Sprintf("vol-%07d", n/2)
		rows = append(rows, timed("page-ms", "list page of 1,000 from the ID index, mid-table (ms; bound 50)", 5, time.Millisecond, func() {
			page, _, next, err := snap.VolumesPage(nil, "default", "default", mid, 1000)
			if err != nil || len(page) != 1000 || next == "" {
				b.Fatalf("page of %d, next %q: %v", len(page), next, err)
			}
		}), timed("page-scan-ms", "list page of 1,000 cut from a scan of every volume (ms)", 5, time.Millisecond, func() {
			all, err := snap.Volumes(nil)
			if err != nil {
				b.Fatal(err)
			}
			i, _ := slices.BinarySearchFunc(all, mid, func(v *structs.Volume, id string) int { return strings.Compare(v.ID, id) })
			if len(all[i:min(i+1000, len(all))]) != 1000 {
				b.Fatal("short page")
			}
		}), timed("scrape-counts-ms", "scrape counts: VolumeStats (ms; bound 50)", 5, time.Millisecond, func() {
			if st, err := snap.VolumeStats(); err != nil || st.Claims[structs.ClaimTaken] != shape.claimed {
				b.Fatalf("%+v %v", st, err)
			}
		}), timed("scrape-scan-ms", "the same counted by scanning every volume (before the stats row) (ms)", 5, time.Millisecond, func() {
			all, _ := snap.Volumes(nil)
			taken := 0
			for _, v := range all {
				for _, c := range v.Claims {
					if c.State == structs.ClaimTaken {
						taken++
					}
				}
			}
			if taken != shape.claimed {
				b.Fatalf("%d taken", taken)
			}
		}), timed("ui-stats-ms", "GET /v1/stats's volume counts: the stats row, claims by node, the stuck volumes (ms)", 5, time.Millisecond, func() {
			st, err := snap.VolumeStats()
			if err != nil || st.Volumes != shape.volumes {
				b.Fatalf("%+v %v", st, err)
			}
			byNode, err := snap.ClaimCountsByNode(nil)
			if err != nil || len(byNode) == 0 {
				b.Fatalf("claims by node %d, %v", len(byNode), err)
			}
			if _, err := snap.StuckVolumes(nil); err != nil {
				b.Fatal(err)
			}
		}), timed("ui-stats-scan-ms", "the same by scanning every volume (before the counts kept in step) (ms)", 5, time.Millisecond, func() {
			all, _ := snap.Volumes(nil)
			byNode, byNS, stuck := map[string]int{}, map[string]int{}, 0
			for _, v := range all {
				byNS[v.Namespace]++
				if v.Stuck != nil {
					stuck++
				}
				for _, c := range v.Claims {
					byNode[c.NodeID]++
				}
			}
			if len(all) != shape.volumes || len(byNode) == 0 {
				b.Fatalf("%d volumes, claims on %d nodes", len(all), len(byNode))
			}
		}), timed("releasable-ms", "releasable volumes (what step-up visits) (ms)", 5, time.Millisecond, func() {
			if refs, err := snap.ReleasableVolumes(nil); err != nil || len(refs) != shape.releasable {
				b.Fatalf("%d releasable, %v", len(refs), err)
			}
		}))
		// One claim write, then what a blocking query on the volumes reads:
		// only the changed volume.
		mark := s.LatestIndex()
		if _, err := s.ApplyAt(mark+1, t0, structs.ClaimGCType, &structs.ClaimGCRequest{
			Volumes: []structs.VolumeRef{{Namespace: "default", ID: "vol-0000000"}}}); err != nil {
			b.Fatal(err)
		}
		after := s.Snapshot()
		rows = append(rows, timed("changed-ms", "volumes changed since one write (blocking-query wake) (ms)", 5, time.Millisecond, func() {
			if vols, err := after.VolumesModifiedSince(nil, mark); err != nil || len(vols) != 1 {
				b.Fatalf("%d volumes changed, %v", len(vols), err)
			}
		}))
		var md strings.Builder
		fmt.Fprintf(&md, "%d volumes, %d claimed, %d releasable; snapshot file %d MiB.\n\n", shape.volumes, shape.claimed, shape.releasable, size>>20)
		md.WriteString("| measure | median [min-max] |\n| --- | ---: |\n")
		for _, r := range rows {
			fmt.Fprintf(&md, "| %s | %s |\n", r.name, r.spread())
			b.ReportMetric(r.median(), r.key)
		}
		b.Logf("\n%s", md.String())
		if out := os.Getenv("VOLHOST_SCALE_OUT"); out != "" {
			if err := os.WriteFile(out, []byte(md.String()), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if out := os.Getenv("VOLHOST_SCALE_JSON"); out != "" {
			medians := map[string]any{"volumes": shape.volumes}
			for _, r := range rows {
				medians[r.key] = r.median()
			}
			raw, _ := json.Marshal(medians)
			if err := os.WriteFile(out, raw, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

type scaleRow struct {
	key  string // metric name for b.ReportMetric
	name string
	vals []float64
}

func (r scaleRow) median() float64 {
	s := slices.Clone(r.vals)
	slices.Sort(s)
	return s[len(s)/2]
}

func (r scaleRow) spread() string {
	if len(r.vals) == 1 {
		return fmt.Sprintf("%.3g", r.vals[0])
	}
	return fmt.Sprintf("%.3g [%.3g-%.3g]", r.median(), slices.Min(r.vals), slices.Max(r.vals))
}

// timed runs fn reps times and records each duration in units of unit.
func timed(key, name string, reps int, unit time.Duration, fn func()) scaleRow {
	r := scaleRow{key: key, name: name}
	for range reps {
		start := time.Now()
		fn()
		r.vals = append(r.vals, float64(time.Since(start))/float64(unit))
	}
	return r
}

// memoryNow is the Go heap in use and the process's RSS, in MiB, after a
// GC that returns freed memory to the OS: the floor of a server holding
// this state (between GC cycles a server's RSS rises towards twice its
// heap with the default GOGC).
func memoryNow() (heap, rss float64) {
	debug.FreeOSMemory()
	return memoryAsIs()
}

// memoryAsIs is the Go heap in use and the process's RSS, in MiB, as they
// stand: no GC first.
func memoryAsIs() (heap, rss float64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20), testutil.RSSMiB()
}

// Walking every page visits each volume once, in order, and a namespace
// filter stops at the namespace's end.
func TestVolumesPage(t *testing.T) {
	s := bulkLoad(t, scaleShape{volumes: 2500, claimed: 10, releasable: 1})
	idx := s.LatestIndex() + 1
	if _, err := s.ApplyAt(idx, t0, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{
		{Namespace: "other", ID: "a", ExternalID: "x", PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem},
	}}); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	all, _ := snap.Volumes(nil)
	for _, tc := range []struct {
		ns    string
		limit int
		want  int
	}{{"", 1000, len(all)}, {"default", 700, 2500}, {"other", 1, 1}, {"none", 10, 0}} {
		var got []*structs.Volume
		ns, id := "", ""
		for pages := 0; ; pages++ {
			if pages > len(all) {
				t.Fatalf("%q: the page walk does not end", tc.ns)
			}
			page, nextNS, nextID, err := snap.VolumesPage(nil, tc.ns, ns, id, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > tc.limit {
				t.Fatalf("%q: page of %d over the limit %d", tc.ns, len(page), tc.limit)
			}
			got = append(got, page...)
			if nextID == "" {
				break
			}
			ns, id = nextNS, nextID
		}
		if len(got) != tc.want {
			t.Fatalf("namespace %q: %d volumes over the pages, want %d", tc.ns, len(got), tc.want)
		}
		for i := 1; i < len(got); i++ {
			if k0, k1 := got[i-1].Namespace+"\x00"+got[i-1].ID, got[i].Namespace+"\x00"+got[i].ID; k0 >= k1 {
				t.Fatalf("namespace %q: %q before %q", tc.ns, k0, k1)
			}
		}
	}
}

// BenchmarkScaleRestored: the memory of a server restarted on the state
// BenchmarkScale built, in a process of its own: it restores the snapshot
// file BenchmarkScale kept at VOLHOST_SCALE_SNAPSHOT and reports the heap
// and RSS after GC and FreeOSMemory. In BenchmarkScale's process the
// restored state would land in the spans the build's many small
// transactions left half filled, and the figure would be the build's.
//
//	VOLHOST_SCALE_SNAPSHOT=/tmp/scale.snap go test -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 30m ./host/state/
//	VOLHOST_SCALE_SNAPSHOT=/tmp/scale.snap go test -run '^$' -bench '^BenchmarkScaleRestored$' -benchtime 1x -timeout 30m ./host/state/
//
// VOLHOST_SCALE_OUT and VOLHOST_SCALE_JSON, when set, name the files
// BenchmarkScale wrote: its figures are added to them.
func BenchmarkScaleRestored(b *testing.B) {
	path := os.Getenv("VOLHOST_SCALE_SNAPSHOT")
	if path == "" {
		b.Skip("VOLHOST_SCALE_SNAPSHOT names no snapshot file (BenchmarkScale writes one)")
	}
	b.StopTimer()
	for range b.N {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		s := NewStore()
		start := time.Now()
		err = s.Restore(bufio.NewReaderSize(f, 1<<20))
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		st, _ := s.Snapshot().VolumeStats()
		heap, rss := memoryNow()
		if out := os.Getenv("VOLHOST_SCALE_HEAPPROFILE"); out != "" {
			writeHeapProfile(b, out)
		}
		// The figure above is a floor taken right after a GC: a server goes
		// on writing. A burst of writes over the restored state (claims and
		// their removal on volumes spread over the table, one entry each as
		// the FSM applies them), then RSS as it stands, with no forced GC.
		burst := writeBurst(b, s, st.Volumes, 10_000)
		_, burstRSS := memoryAsIs()
		burstHeap, _ := memoryNow()
		if out := os.Getenv("VOLHOST_SCALE_HEAPPROFILE"); out != "" {
			writeHeapProfile(b, out+".burst")
		}
		runtime.KeepAlive(s)
		b.ReportMetric(heap, "heap-restored-MiB")
		b.ReportMetric(rss, "rss-restored-MiB")
		b.ReportMetric(burstRSS, "rss-burst-MiB")
		b.ReportMetric(heap*(1<<20)/float64(max(st.Volumes, 1)), "heap-B/volume")
		b.Logf("%d volumes restored in a fresh process in %.1f s: heap %.0f MiB, RSS %.0f MiB; after %d writes RSS %.0f MiB (no forced GC), heap after GC %.0f MiB",
			st.Volumes, took.Seconds(), heap, rss, burst, burstRSS, burstHeap)
		addScaleFigures(b, []scaleRow{
			{"heap-restored-MiB", "Go heap in use after GC, restored in a fresh process (MiB)", []float64{heap}},
			{"rss-restored-MiB", "process RSS after GC and FreeOSMemory, restored in a fresh process (MiB; bound 2048)", []float64{rss}},
			{"rss-burst-MiB", fmt.Sprintf("process RSS after %d writes that follow the restore, no forced GC (MiB; bound 2048)", burst), []float64{burstRSS}},
			{"heap-burst-MiB", "Go heap in use after GC, after those writes (MiB)", []float64{burstHeap}},
		})
	}
}

// addScaleFigures adds rows to the files BenchmarkScale wrote (the
// markdown table VOLHOST_SCALE_OUT, the medians VOLHOST_SCALE_JSON), for
// the benchmarks that measure the same shape in a process of their own.
func addScaleFigures(b *testing.B, rows []scaleRow) {
	if out := os.Getenv("VOLHOST_SCALE_OUT"); out != "" {
		f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rows {
			fmt.Fprintf(f, "| %s | %s |\n", r.name, r.spread())
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if out := os.Getenv("VOLHOST_SCALE_JSON"); out != "" {
		medians := map[string]any{}
		raw, err := os.ReadFile(out)
		if err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(raw, &medians); err != nil {
			b.Fatalf("%s: %v", out, err)
		}
		for _, r := range rows {
			medians[r.key] = r.median()
		}
		if raw, err = json.Marshal(medians); err == nil {
			err = os.WriteFile(out, raw, 0o644)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// writeBurst applies n writes to s, a restored BenchmarkScale store of
// volumes volumes, as the FSM would after the restore: a claim on a volume
// no claim holds (vol-J with J not a multiple of ten) by one of the running
// allocs, then its removal, alternately. It returns how many it applied.
func writeBurst(tb testing.TB, s *Store, volumes, n int) int {
	tb.Helper()
	idx := s.LatestIndex()
	for i := range n / 2 {
		j := (i*7919)%volumes | 1 // odd: never a claimed volume (every tenth)
		vol, alloc := fmt.Sprintf("vol-%07d", j), fmt.Sprintf("alloc-%07d", volumes/100+i%(volumes/10-volumes/100))
		idx++
		if _, err := s.ApplyAt(idx, t0, structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: vol,
			Claim: &structs.Claim{AllocID: alloc, NodeID: fmt.Sprintf("node-%03d", (volumes/100+i%(volumes/10-volumes/100))%100), Mode: structs.ClaimRead, State: structs.ClaimPublishing}}); err != nil {
			tb.Fatalf("burst claim %d: %v", i, err)
		}
		idx++
		if _, err := s.ApplyAt(idx, t0, structs.VolumeClaimRemoveType, &structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: vol, AllocID: alloc, ModifyIndex: idx - 1}); err != nil {
			tb.Fatalf("burst claim removal %d: %v", i, err)
		}
	}
	return n / 2 * 2
}

// writeHeapProfile writes the in-use heap, as of a fresh GC, to path.
func writeHeapProfile(tb testing.TB, path string) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}
