package state

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// BenchmarkClaimCycleBySize: what the store costs one claim and its
// release, at two table sizes in one process, rounds alternating between
// them, so the ratio says whether a claim's cost grows with the table
// (issue: claims through raft fell from 138/s at 200,000 volumes to 45/s
// at 1,000,000). Each size's store is built once by bulkLoad (a tenth of
// its volumes claimed, spread over the table); each round then runs, on
// the same 2,000 unclaimed volumes, every store call the claim path, the
// FSM and the watcher make for a claim and its release:
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
// Reported per claim and size: process CPU with the collector off (its
// cost per claim follows the bytes allocated at a given GOGC, whatever the
// heap) and bytes and objects allocated, medians over the rounds [min-max], and
// the median of the per-round ratio large / small. The claims go to 4
// nodes, as in the scale run. VOLHOST_CYCLE_SIZES=a,b sets the sizes
// (20000,200000); VOLHOST_CYCLE_PROFILE=DIR writes a CPU profile of each
// size's timed part (cpu-N.prof, every round) and its allocations
// (allocs-N.prof, the first round's, against allocs-N-base.prof), for
// `go tool pprof -diff_base`.
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
	const cycles, rounds, nodes = 2000, 5, 4
	profDir := os.Getenv("VOLHOST_CYCLE_PROFILE")
	type fig struct{ cpu, bytes, objects float64 }
	type side struct {
		n    int
		s    *Store
		idx  uint64
		figs []fig
		prof []byte
	}
	for range b.N {
		sides := make([]*side, len(sizes))
		for i, n := range sizes {
			s := bulkLoad(b, scaleShape{volumes: n, claimed: n / 10})
			sides[i] = &side{n: n, s: s, idx: s.LatestIndex()}
		}
		round := 0
		run := func(sd *side) float64 {
			r := round
			s := sd.s
			apply := func(t structs.MessageType, req any) uint64 {
				sd.idx++
				resp, err := s.ApplyAt(sd.idx, t0, t, req)
				if err != nil {
					b.Fatalf("%d volumes, round %d, type %d: %v", sd.n, r, t, err)
				}
				if errs, ok := resp.([]error); ok {
					for _, err := range errs {
						if err != nil {
							b.Fatalf("%d volumes, round %d: %v", sd.n, r, err)
						}
					}
				}
				return sd.idx
			}
			// Volumes between the bulk claims (every tenth is claimed).
			volID := func(k int) string { return fmt.Sprintf("vol-%07d", k*(sd.n/cycles)+1) }
			allocID := func(k int) string { return fmt.Sprintf("alloc-r%d-%05d", r, k) }
			nodeID := func(k int) string { return fmt.Sprintf("node-%03d", k%nodes) }
			allocs := func(status structs.AllocClientStatus) {
				for i := 0; i < cycles; i += 1000 {
					as := make([]*structs.Alloc, 0, 1000)
					for k := i; k < min(i+1000, cycles); k++ {
						as = append(as, &structs.Alloc{ID: allocID(k), Namespace: "default", JobID: "job", NodeID: nodeID(k), ClientStatus: status})
					}
					apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: as})
				}
			}
			runtime.GC()
			// The collector is off in the timed part: with both stores in
			// one heap its cycles would land in whichever side crossed the
			// next goal (a per-round quantum, not the side's cost). What a
			// server's collector spends per claim follows the bytes
			// allocated, reported beside the CPU.
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			var cpuFile *os.File
			if profDir != "" {
				var err error
				if cpuFile, err = os.Create(filepath.Join(profDir, fmt.Sprintf("cpu-%d-r%d.prof", sd.n, r))); err != nil {
					b.Fatal(err)
				}
				if r == 0 {
					writeAllocs(b, filepath.Join(profDir, fmt.Sprintf("allocs-%d-base.prof", sd.n)))
				}
				if err := pprof.StartCPUProfile(cpuFile); err != nil {
					b.Fatal(err)
				}
			}
			cpu0 := rusageCPU(b)

			allocs(structs.AllocRunning)
			for k := range cycles {
				snap := s.Snapshot()
				v, err := snap.VolumeByID(nil, "default", volID(k))
				if err != nil || v == nil {
					b.Fatalf("volume %s: %v", volID(k), err)
				}
				c := &structs.Claim{AllocID: allocID(k), NodeID: nodeID(k), Mode: structs.ClaimWrite, State: structs.ClaimPublishing,
					AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode, CreateTime: t0, ModifyTime: t0}
				rec := &structs.VolumeClaimRequest{Namespace: v.Namespace, VolumeID: v.ID, Claim: c}
				if err := snap.Validate(structs.VolumeClaimType, rec); err != nil {
					b.Fatal(err)
				}
				if n, _ := snap.NodeByID(nil, c.NodeID); n == nil {
					b.Fatal("no node")
				}
				if p, _ := snap.PluginByID(nil, v.PluginID); p == nil {
					b.Fatal("no plugin")
				}
				index := apply(structs.VolumeClaimType, rec)
				if v, _ := s.Snapshot().VolumeByID(nil, "default", volID(k)); v == nil || v.Claims[c.AllocID].ModifyIndex != index {
					b.Fatal("publishing record not committed")
				}
				taken := c.Copy()
				taken.State = structs.ClaimTaken
				apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: v.Namespace, VolumeID: v.ID, Claim: taken})
			}

			woken := sd.idx
			allocs(structs.AllocComplete)
			release := func(state structs.ClaimState) {
				if vols, err := s.Snapshot().VolumesModifiedSince(nil, woken); err != nil || len(vols) == 0 {
					b.Fatalf("watcher wake: %d volumes: %v", len(vols), err)
				}
				woken = sd.idx
				r := s.Reader()
				var batch []*structs.ClaimCheckpointRequest
				for k := range cycles {
					v, _ := r.Volume("default", volID(k))
					a, _ := r.Alloc(allocID(k))
					n, _ := r.Node(nodeID(k))
					p, _ := r.Plugin(v.PluginID)
					if a == nil || n == nil || p == nil {
						b.Fatal("watcher reads")
					}
					ck := &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: v.ID, Claim: v.Claims[a.ID].Copy()}
					ck.Claim.State = state
					if state == structs.ClaimControllerDetached {
						ck.ControllerUnpublished, ck.Free = true, true
					}
					if err := s.Snapshot().Validate(structs.ClaimCheckpointType, ck); err != nil {
						b.Fatal(err)
					}
					if batch = append(batch, ck); len(batch) == 3 || k == cycles-1 {
						apply(structs.ClaimCheckpointBatchType, &structs.ClaimCheckpointBatchRequest{Checkpoints: batch})
						batch = nil
					}
				}
			}
			release(structs.ClaimNodeDetached)
			release(structs.ClaimControllerDetached)

			cpu := rusageCPU(b) - cpu0
			if cpuFile != nil {
				pprof.StopCPUProfile()
				cpuFile.Close()
				if r == 0 {
					writeAllocs(b, filepath.Join(profDir, fmt.Sprintf("allocs-%d.prof", sd.n)))
				}
			}
			runtime.ReadMemStats(&m1)
			if st, _ := s.Snapshot().VolumeStats(); st.Claims[structs.ClaimTaken] != sd.n/10 {
				b.Fatalf("%d volumes: %d claims taken after the round, want the bulk load's %d", sd.n, st.Claims[structs.ClaimTaken], sd.n/10)
			}
			f := fig{cpu: float64(cpu.Nanoseconds()) / 1e3 / cycles,
				bytes: float64(m1.TotalAlloc-m0.TotalAlloc) / cycles, objects: float64(m1.Mallocs-m0.Mallocs) / cycles}
			sd.figs = append(sd.figs, f)
			return f.cpu
		}
		for range rounds {
			for _, sd := range sides {
				run(sd)
			}
			round++
		}
		small, large := sides[0], sides[1]
		for _, m := range []struct {
			name string
			get  func(fig) float64
		}{
			{"cpu-us/claim", func(f fig) float64 { return f.cpu }},
			{"alloc-B/claim", func(f fig) float64 { return f.bytes }},
			{"allocs/claim", func(f fig) float64 { return f.objects }},
		} {
			var a, c []float64
			for i := range small.figs {
				a, c = append(a, m.get(small.figs[i])), append(c, m.get(large.figs[i]))
			}
			b.Logf("%s: %d volumes %s, %d volumes %s, %d/%d per round %s",
				m.name, small.n, testutil.SpreadOf(a), large.n, testutil.SpreadOf(c), large.n, small.n, testutil.SpreadOf(testutil.Ratios(c, a)))
			b.ReportMetric(testutil.SpreadOf(a).Median, fmt.Sprintf("%dk-%s", small.n/1000, m.name))
			b.ReportMetric(testutil.SpreadOf(c).Median, fmt.Sprintf("%dk-%s", large.n/1000, m.name))
			b.ReportMetric(testutil.SpreadOf(testutil.Ratios(c, a)).Median, "ratio-"+m.name)
		}
	}
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
