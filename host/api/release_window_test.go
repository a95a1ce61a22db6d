package api

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// The agent's running release window answers what a scan of the whole
// window answers, request after request while claims are released, and
// after a restore replaces the events with an older state's; and it reads
// only the events appended since its last request.
func TestReleaseWindowMatchesScan(t *testing.T) {
	if len(latencyBounds)+1 != len(minuteReleases{}.latency) {
		t.Fatalf("minuteReleases has %d latency buckets, the stats %d", len(minuteReleases{}.latency), len(latencyBounds)+1)
	}
	clk := clockwork.NewFakeClockAt(time.Now().Add(-20 * time.Minute))
	st := state.NewStore(state.WithClock(clk))
	idx := uint64(0)
	apply := func(mt structs.MessageType, req any) {
		t.Helper()
		idx++
		if _, err := st.Apply(idx, mt, req); err != nil {
			t.Fatalf("apply %d: %v", mt, err)
		}
	}
	apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p1"}})
	apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady}})
	var vols []*structs.Volume
	for i := range 30 {
		vols = append(vols, &structs.Volume{Namespace: []string{"default", "prod"}[i%2], ID: fmt.Sprintf("v%02d", i), PluginID: "p1",
			ExternalID: fmt.Sprintf("d%02d", i), AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
	}
	apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
	release := func(i int) {
		v, alloc := vols[i], fmt.Sprintf("a%02d", i)
		apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: alloc, Namespace: v.Namespace, NodeID: "n1", ClientStatus: structs.AllocRunning}}})
		apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: v.Namespace, VolumeID: v.ID,
			Claim: &structs.Claim{AllocID: alloc, NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimTaken}})
		apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: alloc, Namespace: v.Namespace, NodeID: "n1", ClientStatus: structs.AllocComplete}}})
		for _, s := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree} {
			clk.Advance(time.Duration(i+1) * 700 * time.Millisecond)
			apply(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: v.Namespace, VolumeID: v.ID,
				Claim: &structs.Claim{AllocID: alloc, NodeID: "n1", Mode: structs.ClaimWrite, State: s}})
		}
		clk.Advance(20 * time.Second)
	}
	var running releaseWindow
	check := func(step string) {
		t.Helper()
		now := time.Now()
		for _, ns := range []string{"", "prod"} {
			got, err := computeStats(nil, st.Snapshot(), ns, now, &running)
			if err != nil {
				t.Fatal(err)
			}
			var scan windowTotals
			want := &StatsResponse{Releases: got.Releases, Latency: got.Latency}
			want.Releases, want.Latency = zeroSeries(got)
			es, _, err := st.Snapshot().EventsFiltered(nil, state.EventFilter{After: got.WindowStart})
			if err != nil {
				t.Fatal(err)
			}
			snap := st.Snapshot()
			for _, e := range es {
				if ns != "" && e.Event.Namespace != ns {
					continue
				}
				if err := scan.fold(e.Event, func(id string) (*structs.Alloc, error) { return snap.AllocByID(nil, id) }); err != nil {
					t.Fatal(err)
				}
			}
			scan.render(want, got.WindowStart)
			if !reflect.DeepEqual(got.Releases, want.Releases) || !reflect.DeepEqual(got.Latency, want.Latency) || got.LatencyBasis != want.LatencyBasis {
				t.Fatalf("%s (namespace %q): running window\n%+v %+v %q\nscan\n%+v %+v %q", step, ns,
					got.Releases, got.Latency, got.LatencyBasis, want.Releases, want.Latency, want.LatencyBasis)
			}
		}
	}
	var saved bytes.Buffer
	for i := range vols {
		release(i)
		if i%4 == 0 {
			check(fmt.Sprintf("after release %d", i))
		}
		if i == 10 {
			if err := st.Persist(&saved); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("all released")
	folded := running.st.nextSeq
	check("again, nothing new")
	if running.st.nextSeq != folded {
		t.Fatalf("a request with nothing new moved the window from %d to %d", folded, running.st.nextSeq)
	}
	if err := st.Restore(&saved); err != nil {
		t.Fatal(err)
	}
	check("after a restore of an older state")
}

// zeroSeries is got's series shape with every count zero.
func zeroSeries(got *StatsResponse) ([]MinuteCount, []LatencyBucket) {
	r := make([]MinuteCount, len(got.Releases))
	for i, m := range got.Releases {
		r[i] = MinuteCount{Minute: m.Minute}
	}
	l := make([]LatencyBucket, len(got.Latency))
	for i, b := range got.Latency {
		l[i] = LatencyBucket{LessThanSeconds: b.LessThanSeconds, Label: b.Label}
	}
	return r, l
}
