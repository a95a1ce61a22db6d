package state

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// BenchmarkReleaseWrites: the store's side of
// releasing 1,000 claims as the FSM applies it, with and without ownRows
// (own_rows.go), sides alternating round after round in one process: one
// allocation update ending the claims' allocations (each claimed volume
// woken), then group commits of three checkpoints each (the release
// benchmark's 2.6 checkpoints per raft entry), node-detached and then
// controller-detached freeing the claim. The store, 10,000 volumes, is
// built afresh and untimed for each side and round. Reported per claim:
// process CPU (a GC before the timed part; the collector's work during it
// counted), bytes and objects allocated, each side's median over the rounds
// [min-max] and the median of the per-round ratio own / through.
// VOLHOST_PER_ENTRY=N puts N checkpoints in each entry instead of 3: what
// a raft entry costs the store whatever it holds (its transaction's
// radix and cache set-up per index touched, the index, stats and
// volume_mods rows) is the difference.
//
//	go test -run '^$' -bench '^BenchmarkReleaseWrites$' -benchtime 1x ./host/state/
//	VOLHOST_PER_ENTRY=1 go test -run '^$' -bench '^BenchmarkReleaseWrites$' -benchtime 1x ./host/state/
func BenchmarkReleaseWrites(b *testing.B) {
	const claimed, rounds = 1000, 7
	perEntry := 3
	if n, err := strconv.Atoi(os.Getenv("VOLHOST_PER_ENTRY")); err == nil && n > 0 {
		perEntry = n
	}
	type fig struct{ cpu, bytes, objects float64 }
	run := func(off bool) fig {
		s := bulkLoad(b, scaleShape{volumes: 10 * claimed, claimed: claimed})
		idx := s.LatestIndex()
		ended := make([]*structs.Alloc, 0, claimed)
		claims := make([]*structs.ClaimCheckpointRequest, 0, claimed)
		snap := s.Snapshot()
		for j := range claimed {
			a, _ := snap.AllocByID(nil, fmt.Sprintf("alloc-%07d", j))
			a = a.Copy()
			a.ClientStatus = structs.AllocComplete
			ended = append(ended, a)
			v, _ := snap.VolumeByID(nil, "default", fmt.Sprintf("vol-%07d", j*10))
			claims = append(claims, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: v.ID, Claim: v.Claims[a.ID]})
		}
		// The requests as the FSM decodes them: fresh per entry.
		entry := func(from int, state structs.ClaimState) *structs.ClaimCheckpointBatchRequest {
			r := &structs.ClaimCheckpointBatchRequest{}
			for _, c := range claims[from:min(from+perEntry, len(claims))] {
				ck := *c
				ck.Claim = c.Claim.Copy()
				ck.Claim.State = state
				if state == structs.ClaimControllerDetached {
					ck.ControllerUnpublished, ck.Free = true, true
				}
				r.Checkpoints = append(r.Checkpoints, &ck)
			}
			return r
		}
		var nodeDetached, freed []*structs.ClaimCheckpointBatchRequest
		for i := 0; i < claimed; i += perEntry {
			nodeDetached = append(nodeDetached, entry(i, structs.ClaimNodeDetached))
			freed = append(freed, entry(i, structs.ClaimControllerDetached))
		}
		defer func(check bool) { ownRowsOff, ownRowsCheck = false, check }(ownRowsCheck)
		ownRowsOff, ownRowsCheck = off, false
		apply := func(t structs.MessageType, req any) {
			idx++
			resp, err := s.ApplyAt(idx, t0, t, req)
			if err != nil {
				b.Fatal(err)
			}
			if errs, ok := resp.([]error); ok {
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		cpu0 := rusageCPU(b)
		apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: ended})
		for i := range nodeDetached {
			apply(structs.ClaimCheckpointBatchType, nodeDetached[i])
		}
		for i := range freed {
			apply(structs.ClaimCheckpointBatchType, freed[i])
		}
		cpu := rusageCPU(b) - cpu0
		runtime.ReadMemStats(&m1)
		if n := len(s.Snapshot().volumesClaimedCount(b)); n != 0 {
			b.Fatalf("%d claims left", n)
		}
		return fig{
			cpu:     float64(cpu.Nanoseconds()) / 1e3 / claimed,
			bytes:   float64(m1.TotalAlloc-m0.TotalAlloc) / claimed,
			objects: float64(m1.Mallocs-m0.Mallocs) / claimed,
		}
	}
	for range b.N {
		var own, through []fig
		testutil.Interleave(rounds,
			func() float64 { own = append(own, run(false)); return 0 },
			func() float64 { through = append(through, run(true)); return 0 })
		for _, m := range []struct {
			name string
			get  func(fig) float64
		}{
			{"cpu-us/claim", func(f fig) float64 { return f.cpu }},
			{"alloc-B/claim", func(f fig) float64 { return f.bytes }},
			{"allocs/claim", func(f fig) float64 { return f.objects }},
		} {
			var a, t []float64
			for i := range own {
				a, t = append(a, m.get(own[i])), append(t, m.get(through[i]))
			}
			b.Logf("%s: own %s, through the transaction %s, own/through per round %s",
				m.name, testutil.SpreadOf(a), testutil.SpreadOf(t), testutil.SpreadOf(testutil.Ratios(a, t)))
			b.ReportMetric(testutil.SpreadOf(a).Median, "own-"+m.name)
			b.ReportMetric(testutil.SpreadOf(t).Median, "through-"+m.name)
		}
	}
}

// volumesClaimedCount lists the claim rows left (the benchmark frees all).
func (snap *Snapshot) volumesClaimedCount(tb testing.TB) []any {
	it, err := snap.txn.Get(tableClaims, indexID)
	if err != nil {
		tb.Fatal(err)
	}
	var out []any
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw)
	}
	return out
}

func rusageCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
