package state

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// BenchmarkUIReadsAtScale compares, in one process and in interleaved
// rounds, two reads the web UI polls against what they replaced, over a
// store of VOLHOST_SCALE_VOLUMES volumes (default 200,000; a tenth
// claimed, bulkLoad) with the volume rings of the events table full
// (DefaultMaxVolumeEvents claim transitions) and 100 module events among
// them:
//
//   - GET /v1/stats's claims by node: the counts kept per node
//     (ClaimCountsByNode) against the walk of every claim row by node it
//     replaced;
//   - GET /v1/events?type=module&per_page=1000: the type index
//     (EventsFiltered) against the scan from the oldest event it replaced.
//
// Each figure is the median of ROUNDS (VOLHOST_SCALE_ROUNDS, default 7)
// with min and max; the sides alternate within every round.
//
//	VOLHOST_SCALE_VOLUMES=200000 go test -run '^$' -bench '^BenchmarkUIReadsAtScale$' -benchtime 1x -timeout 30m ./host/state/
func BenchmarkUIReadsAtScale(b *testing.B) {
	shape := shapeOf(testutil.EnvInt(b, "VOLHOST_SCALE_VOLUMES", 200000, 1))
	rounds := testutil.EnvInt(b, "VOLHOST_SCALE_ROUNDS", 7, 1)
	for range b.N {
		b.StopTimer()
		s := bulkLoad(b, shape)
		idx := s.LatestIndex()
		const batch = 1000
		for i := 0; i < DefaultMaxVolumeEvents; i += batch {
			evs := make([]*structs.Event, 0, batch)
			for j := i; j < i+batch; j++ {
				e := &structs.Event{Type: structs.EventClaimTransition, Namespace: "default", VolumeID: fmt.Sprintf("vol-%07d", j%shape.volumes), Message: "claim moved"}
				if j%(DefaultMaxVolumeEvents/100) == 0 {
					e = &structs.Event{Type: structs.EventModule, Module: "policy", Message: "module reloaded"}
				}
				evs = append(evs, e)
			}
			idx++
			if _, err := s.ApplyAt(idx, t0, structs.EventAppendType, &structs.EventAppendRequest{Events: evs}); err != nil {
				b.Fatal(err)
			}
		}
		snap := s.Snapshot()
		oldByNode := func() map[string]int {
			it, err := snap.txn.Get(tableClaims, indexNode)
			if err != nil {
				b.Fatal(err)
			}
			counts := map[string]int{}
			for raw := it.Next(); raw != nil; raw = it.Next() {
				counts[raw.(*claimRow).NodeID]++
			}
			return counts
		}
		oldByType := func(typ string, limit int) []EventEntry {
			it, err := snap.txn.LowerBound(TableEvents, indexID, uint64(1))
			if err != nil {
				b.Fatal(err)
			}
			var out []EventEntry
			for raw := it.Next(); raw != nil && len(out) < limit; raw = it.Next() {
				if r := raw.(*eventRow); r.Event.Type == typ {
					out = append(out, EventEntry{Seq: r.Seq, Event: r.Event})
				}
			}
			return out
		}
		wantNodes, err := snap.ClaimCountsByNode(nil)
		if err != nil {
			b.Fatal(err)
		}
		if got := oldByNode(); !mapsEqual(got, wantNodes) || len(wantNodes) == 0 {
			b.Fatalf("claims by node: counts %v, the walk %v", wantNodes, got)
		}
		mods, _, err := snap.EventsFiltered(nil, EventFilter{Type: structs.EventModule, Limit: 1000})
		if err != nil || len(mods) == 0 || len(mods) != len(oldByType(structs.EventModule, 1000)) {
			b.Fatalf("module events: %d by the index, %d by the scan, %v", len(mods), len(oldByType(structs.EventModule, 1000)), err)
		}
		sides := []struct {
			name string
			fn   func()
		}{
			{"claims by node: counts kept per node", func() { _, _ = snap.ClaimCountsByNode(nil) }},
			{"claims by node: walk of every claim (before)", func() { oldByNode() }},
			{"module events, 1,000 a page: type index", func() {
				_, _, _ = snap.EventsFiltered(nil, EventFilter{Type: structs.EventModule, Limit: 1000})
			}},
			{"module events, 1,000 a page: scan from the oldest event (before)", func() { oldByType(structs.EventModule, 1000) }},
		}
		ms := make([][]float64, len(sides))
		for r := range rounds {
			for i := range sides {
				k := (i + r) % len(sides) // a different side first each round
				start := time.Now()
				sides[k].fn()
				ms[k] = append(ms[k], float64(time.Since(start).Microseconds())/1000)
			}
		}
		var md strings.Builder
		fmt.Fprintf(&md, "%d volumes, %d claimed on 100 nodes, %d events (%d module); %d interleaved rounds.\n\n",
			shape.volumes, shape.claimed, DefaultMaxVolumeEvents, len(mods), rounds)
		md.WriteString("| read | median [min-max] ms |\n| --- | ---: |\n")
		for i, sd := range sides {
			v := slices.Clone(ms[i])
			slices.Sort(v)
			fmt.Fprintf(&md, "| %s | %.3g [%.3g-%.3g] |\n", sd.name, v[len(v)/2], v[0], v[len(v)-1])
			b.ReportMetric(v[len(v)/2], fmt.Sprintf("side%d-ms", i))
		}
		b.Logf("\n%s", md.String())
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
