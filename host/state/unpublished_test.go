package state

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// Exactly one NodeUnpublish per claim: the NodeUnpublished mark records, on a taken claim, that its
// NodeUnpublish succeeded. The store takes it only for a terminal
// allocation's taken claim that has a target path, never lets a later
// checkpoint clear it, and refuses leave state untouched.
func TestCheckpointNodeUnpublished(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running bool // the allocation has not ended
		setup   func(f *fixture)
		mutate  func(c *structs.Claim)
		want    string
	}{
		{name: "set on a taken claim of an ended allocation", want: "ok",
			mutate: func(c *structs.Claim) { c.NodeUnpublished = true }},
		{name: "set while the allocation runs", want: "conflict", running: true,
			mutate: func(c *structs.Claim) { c.NodeUnpublished = true }},
		{name: "set without a target path", want: "invalid:claim.node_unpublished",
			mutate: func(c *structs.Claim) { c.NodeUnpublished, c.TargetPath = true, "" }},
		{name: "set with another target path", want: "invalid:claim.node_unpublished",
			mutate: func(c *structs.Claim) { c.NodeUnpublished, c.TargetPath = true, "/elsewhere" }},
		{name: "set together with node-detached", want: "invalid:claim.node_unpublished",
			mutate: func(c *structs.Claim) { c.NodeUnpublished, c.State = true, structs.ClaimNodeDetached }},
		{name: "cleared again", want: "conflict",
			setup: func(f *fixture) {
				c := f.volume("default", "vol-sw").Claims["a1"].Copy()
				c.NodeUnpublished = true
				f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c})
			},
			mutate: func(c *structs.Claim) { c.NodeUnpublished, c.Attempts = false, 1 }},
		{name: "kept while a failure is recorded", want: "ok",
			setup: func(f *fixture) {
				c := f.volume("default", "vol-sw").Claims["a1"].Copy()
				c.NodeUnpublished = true
				f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c})
			},
			mutate: func(c *structs.Claim) { c.Attempts = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
				Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, ExternalNodeID: "ext-n1",
					StagingPath: "/root/staging/vol-sw", TargetPath: "/root/per-alloc/a1/vol-sw"}})
			if !tc.running {
				f.setAlloc("a1", structs.AllocComplete)
			}
			if tc.setup != nil {
				tc.setup(f)
			}
			before := f.index(TableVolumes)
			c := f.volume("default", "vol-sw").Claims["a1"].Copy()
			tc.mutate(c)
			_, err := f.apply(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c})
			if got := errKind(err); got != tc.want {
				t.Fatalf("checkpoint: %s (%v), want %s", got, err, tc.want)
			}
			if tc.want != "ok" && f.index(TableVolumes) != before {
				t.Fatal("a refused checkpoint changed the volumes table")
			}
		})
	}
}

// The first NodeUnpublished checkpoint is a transition event, not a
// "failed attempt" one.
func TestCheckpointNodeUnpublishedEvent(t *testing.T) {
	f := newFixture(t)
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
		Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, TargetPath: "/t"}})
	f.setAlloc("a1", structs.AllocComplete)
	c := f.volume("default", "vol-sw").Claims["a1"].Copy()
	c.NodeUnpublished = true
	f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c})
	if !f.volume("default", "vol-sw").Claims["a1"].NodeUnpublished {
		t.Fatal("the mark was not stored")
	}
	evs := f.events()
	if e := evs[len(evs)-1]; e.Type != structs.EventClaimTransition || e.Fields["node_unpublished"] != "true" {
		t.Fatalf("event %+v", e)
	}
}
