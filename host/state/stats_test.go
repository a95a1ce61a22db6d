package state

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// checkStats fails t unless the store's maintained VolumeStats equal a
// count over every volume of the same snapshot.
func checkStats(t *testing.T, s *Store) {
	t.Helper()
	snap := s.Snapshot()
	got, err := snap.VolumeStats()
	if err != nil {
		t.Fatal(err)
	}
	vols, err := snap.Volumes(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := VolumeStats{Volumes: len(vols), Claims: map[structs.ClaimState]int{}, ByPlugin: map[string]int{}, ByNamespace: map[string]int{}}
	var wantStuck []*structs.Volume
	wantByNode := map[string]int{}
	for _, v := range vols {
		want.ByPlugin[v.PluginID]++
		want.ByNamespace[v.Namespace]++
		if v.Stuck != nil {
			want.Stuck++
			wantStuck = append(wantStuck, v)
		}
		for _, cl := range v.Claims {
			want.Claims[cl.State]++
			wantByNode[cl.NodeID]++
			if cl.LastError != nil {
				want.Failing++
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("maintained volume stats %+v, a scan counts %+v", got, want)
	}
	// What GET /v1/stats reads instead of the scan: the stuck index and
	// the claims table.
	stuck, err := snap.StuckVolumes(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stuck, wantStuck) {
		t.Fatalf("stuck table lists %d volumes, a scan finds %d", len(stuck), len(wantStuck))
	}
	// The walk ?stuck=true pages with, from the start and from the second
	// stuck volume's key, yields the stuck volumes alone.
	for from := range min(len(wantStuck), 2) {
		next, err := snap.StuckVolumesFrom(nil, wantStuck[from].Namespace, wantStuck[from].ID)
		if err != nil {
			t.Fatal(err)
		}
		var walked []*structs.Volume
		for v := next(); v != nil; v = next() {
			walked = append(walked, v)
		}
		if !reflect.DeepEqual(walked, wantStuck[from:]) {
			t.Fatalf("stuck walk from %s/%s gives %d volumes, a scan %d", wantStuck[from].Namespace, wantStuck[from].ID, len(walked), len(wantStuck[from:]))
		}
	}
	byNode, err := snap.ClaimCountsByNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(byNode, wantByNode) {
		t.Fatalf("claims by node %v, a scan counts %v", byNode, wantByNode)
	}
}

// The counters follow every kind of volume write (claims through their
// states, a last error, stuck and unstuck, removal, deregistration), and a
// restore recounts them; a refused write leaves them as they were.
func TestVolumeStatsFollowWrites(t *testing.T) {
	f := newFixture(t)
	checkStats(t, f.s)
	if st, _ := f.s.Snapshot().VolumeStats(); st.Volumes == 0 {
		t.Fatal("base data has no volumes: the test proves nothing")
	}
	f.claim("vol-mw", "a1", structs.ClaimWrite)
	a2 := f.publishing("vol-mw", "a2", structs.ClaimRead)
	checkStats(t, f.s)
	if st, _ := f.s.Snapshot().VolumeStats(); st.Claims[structs.ClaimTaken] != 1 || st.Claims[structs.ClaimPublishing] != 1 {
		t.Fatalf("one claim taken and one publishing, stats say %+v", st)
	}
	before, _ := f.s.Snapshot().VolumeStats()
	// Refused: a claim cannot jump to ready-to-free while its alloc runs.
	if err := f.checkpoint("vol-mw", "a1", structs.ClaimReadyToFree); err == nil {
		t.Fatal("a refused transition was accepted: pick another refused write")
	}
	if after, _ := f.s.Snapshot().VolumeStats(); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused write changed the stats: %+v -> %+v", before, after)
	}
	f.setAlloc("a1", structs.AllocComplete)
	c := f.volume("default", "vol-mw").Claims["a1"].Copy()
	c.State = structs.ClaimNodeDetached
	c.LastError = &structs.ClaimError{Message: "controller said no"}
	f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw", Claim: c})
	checkStats(t, f.s)
	if st, _ := f.s.Snapshot().VolumeStats(); st.Failing != 1 || st.Claims[structs.ClaimNodeDetached] != 1 {
		t.Fatalf("stats %+v", st)
	}
	f.must(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-mw", Stuck: &structs.Stuck{Reason: "test"}})
	checkStats(t, f.s)
	f.must(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-mw"})
	checkStats(t, f.s)
	f.must(structs.VolumeClaimRemoveType, &structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: "vol-mw", AllocID: "a2", ModifyIndex: a2})
	checkStats(t, f.s)

	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	restored := NewStore()
	if err := restored.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	checkStats(t, restored)
	a, _ := f.s.Snapshot().VolumeStats()
	b, _ := restored.Snapshot().VolumeStats()
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("restored stats %+v, original %+v", b, a)
	}
}

// The stuck rows and the counts are rebuilt wherever a store is built
// without its writer: a restore, a restore of a stream that repeats volume
// rows (rebuilt from the table), and an import.
func TestStuckRowsRebuilt(t *testing.T) {
	f := richFixture(t)
	// A second stuck volume, so the walks from a mid key have one to skip.
	f.must(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-ro", Stuck: &structs.Stuck{Reason: "test"}})
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	restored := NewStore()
	if err := restored.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	unordered := NewStore()
	if err := unordered.Restore(strings.NewReader(withReversedVolumeRows(t, f.s))); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Store{"original": f.s, "restored": restored, "unordered rows": unordered, "imported": importStream(t, buf.Bytes())} {
		t.Run(name, func(t *testing.T) {
			checkStats(t, s)
			if stuck, _ := s.Snapshot().StuckVolumes(nil); len(stuck) < 2 {
				t.Fatalf("%d stuck volumes: the fixture proves little", len(stuck))
			}
		})
	}
}
