package state

import (
	"slices"
	"testing"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// checkClaims fails t unless the claims table of s holds exactly one row
// per claim of its volumes, with the claim's node.
func checkClaims(t *testing.T, s *Store, when string) {
	t.Helper()
	snap := s.Snapshot()
	vols, err := snap.Volumes(nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []claimRow
	for _, v := range vols {
		for allocID, c := range v.Claims {
			want = append(want, claimRow{AllocID: allocID, NodeID: c.NodeID, Volume: structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}})
		}
	}
	var got []claimRow
	it, err := snap.txn.Get(tableClaims, indexID)
	if err != nil {
		t.Fatal(err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		got = append(got, *raw.(*claimRow))
	}
	byKey := func(a, b claimRow) int {
		if a.AllocID != b.AllocID {
			return compareStrings(a.AllocID, b.AllocID)
		}
		return compareRefs(a.Volume, b.Volume)
	}
	slices.SortFunc(want, byKey)
	if !slices.IsSortedFunc(got, byKey) || !slices.Equal(got, want) {
		t.Fatalf("%s: claims table %v, the volumes' claims %v", when, got, want)
	}
	checkClaimedWalk(t, snap, vols, when)
}

// checkClaimedWalk fails t unless ClaimedVolumesFrom, from every volume's
// key and from the start, walks exactly the volumes with a claim from
// there, in key order, each once (what ?claim_state= pages through).
func checkClaimedWalk(t *testing.T, snap *Snapshot, vols []*structs.Volume, when string) {
	t.Helper()
	starts := [][2]string{{"", ""}}
	for _, v := range vols {
		starts = append(starts, [2]string{v.Namespace, v.ID}, [2]string{v.Namespace, v.ID + "\x01"})
	}
	for _, st := range starts {
		var want, got []string
		all, err := snap.VolumesFrom(nil, st[0], st[1])
		if err != nil {
			t.Fatal(err)
		}
		for v := all(); v != nil; v = all() {
			if len(v.Claims) > 0 {
				want = append(want, v.Namespace+"/"+v.ID)
			}
		}
		claimed, err := snap.ClaimedVolumesFrom(memdb.NewWatchSet(), st[0], st[1])
		if err != nil {
			t.Fatal(err)
		}
		for v := claimed(); v != nil; v = claimed() {
			got = append(got, v.Namespace+"/"+v.ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: claimed volumes from %q/%q: %v, want %v", when, st[0], st[1], got, want)
		}
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// A checkpoint that moves a claim without freeing it leaves the claims
// table alone: the releasable-volumes query, which reads the claims, is
// not woken by it (the volumes table's claim indexes were re-inserted by
// every volume write, so it was); the checkpoint that frees the claim
// removes its row and wakes it.
func TestClaimsTableWrittenOnlyWhenClaimsChange(t *testing.T) {
	f := newEmpty(t)
	vol, alloc := claimedVolume(t, f)
	f.setAlloc(alloc, structs.AllocComplete)
	ws := memdb.NewWatchSet()
	refs, err := f.s.Snapshot().ReleasableVolumes(ws)
	if err != nil || len(refs) != 1 || refs[0].ID != vol {
		t.Fatalf("releasable: %v, %v", refs, err)
	}
	if err := f.checkpoint(vol, alloc, structs.ClaimNodeDetached); err != nil {
		t.Fatal(err)
	}
	if woken(ws) {
		t.Fatal("a checkpoint that changed no claim's alloc or node woke the releasable-volumes query")
	}
	checkClaims(t, f.s, "after node-detached")
	c := f.volume("default", vol).Claims[alloc].Copy()
	c.State = structs.ClaimControllerDetached
	f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: vol, Claim: c, Free: true})
	if !woken(ws) {
		t.Fatal("freeing the claim did not wake the releasable-volumes query")
	}
	if vols, err := f.s.Snapshot().VolumesClaimedByAlloc(nil, alloc); err != nil || len(vols) != 0 {
		t.Fatalf("claimed by %s after the free: %v, %v", alloc, vols, err)
	}
	if refs, err := f.s.Snapshot().ReleasableVolumes(nil); err != nil || len(refs) != 0 {
		t.Fatalf("releasable after the free: %v, %v", refs, err)
	}
	checkClaims(t, f.s, "after the free")
}

// claimedVolume sets up a volume with one taken claim.
func claimedVolume(t *testing.T, f *fixture) (vol, alloc string) {
	t.Helper()
	f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "ebs", Provider: "ebs.csi.example"}})
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady, LastSeen: t0,
		Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix:///run/csi.sock", ExternalNodeID: "i-n1"}}}})
	f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning}}})
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{Namespace: "default", ID: "solo", ExternalID: "d",
		PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}}})
	f.claim("solo", "a1", structs.ClaimWrite)
	return "solo", "a1"
}

// woken reports whether a channel of ws is closed, without waiting.
func woken(ws memdb.WatchSet) bool {
	for ch := range ws {
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}

// An allocation turning terminal wakes its volume with a new version that
// shares the claims of the one before (nothing of them changed), not with
// a deep copy; the version before stays as it was.
func TestTouchSharesUnchangedClaims(t *testing.T) {
	f := newEmpty(t)
	vol, alloc := claimedVolume(t, f)
	before := f.volume("default", vol)
	f.setAlloc(alloc, structs.AllocComplete)
	after := f.volume("default", vol)
	if after.ModifyIndex <= before.ModifyIndex {
		t.Fatalf("volume not woken: modify index %d, before %d", after.ModifyIndex, before.ModifyIndex)
	}
	if after.Claims[alloc] != before.Claims[alloc] {
		t.Fatal("the woken volume's claim is a copy of the unchanged one")
	}
	if before.ModifyIndex == after.ModifyIndex || before.Claims[alloc].State != structs.ClaimTaken {
		t.Fatal("the version before was changed")
	}
	checkClaims(t, f.s, "after the touch")
}
