package state

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// The claim path's write-ahead record: a publishing claim counts against
// the volume like any claim, is confirmed taken only by the same publish,
// is removed without release only by the run that created it, and
// survives a snapshot and its restore. Every refusal is one clear error
// and leaves the volume as it was.
func TestPublishingClaimWrites(t *testing.T) {
	f := newFixture(t)
	idx := f.publishing("vol-sw", "a1", structs.ClaimWrite)
	c := f.volume("default", "vol-sw").Claims["a1"]
	if c.State != structs.ClaimPublishing || c.CreateIndex != idx || c.ModifyIndex != idx {
		t.Fatalf("publishing record %+v", c)
	}
	if c.Staged() != structs.EffectUnknown || c.Published() != structs.EffectUnknown || c.Attached() != structs.EffectUnknown {
		t.Fatalf("a publishing claim's effects are not unknown: staged %s, published %s, attached %s", c.Staged(), c.Published(), c.Attached())
	}
	refused := func(name, want string, typ structs.MessageType, req any) {
		t.Helper()
		before := f.volume("default", "vol-sw")
		_, err := f.apply(typ, req)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, want)
		}
		if after := f.volume("default", "vol-sw"); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: the refused write changed the volume: %+v -> %+v", name, before, after)
		}
	}
	with := func(edit func(c *structs.Claim)) *structs.VolumeClaimRequest {
		c := f.volume("default", "vol-sw").Claims["a1"].Copy()
		c.CreateIndex, c.ModifyIndex = 0, 0
		edit(c)
		return &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c}
	}
	// Capacity: the single-writer volume is held from the record on.
	f.alloc("a5")
	refused("a second writer", "hold its write claim", structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
		Claim: &structs.Claim{AllocID: "a5", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimPublishing}})
	refused("taken over another publish", "a claim taken over it must be that same publish", structs.VolumeClaimType,
		with(func(c *structs.Claim) { c.State, c.TargetPath = structs.ClaimTaken, "/elsewhere" }))
	refused("taken up with another external node ID", "must be that same publish", structs.VolumeClaimType,
		with(func(c *structs.Claim) { c.ExternalNodeID = "ext-other" }))
	refused("a release mark written by the claim path", "node_unpublished", structs.VolumeClaimType,
		with(func(c *structs.Claim) { c.State, c.NodeUnpublished = structs.ClaimTaken, true }))
	ck := f.volume("default", "vol-sw").Claims["a1"].Copy()
	ck.State = structs.ClaimTaken
	refused("a checkpoint confirming it", "by a release checkpoint", structs.ClaimCheckpointType,
		&structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: ck})
	refused("removed as another run's record", "only the run that created a record", structs.VolumeClaimRemoveType,
		&structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: "vol-sw", AllocID: "a1", ModifyIndex: idx - 1})

	// Snapshot and restore (and a replica replaying the log) keep it.
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	restored := NewStore()
	if err := restored.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if got, _ := restored.Snapshot().VolumeByID(nil, "default", "vol-sw"); !reflect.DeepEqual(got, f.volume("default", "vol-sw")) {
		t.Fatalf("restored %+v, want %+v", got, f.volume("default", "vol-sw"))
	}

	// A retry takes it up (written again): from then on it is never
	// removed without release, even by the run that wrote it last.
	f.must(structs.VolumeClaimType, with(func(*structs.Claim) {}))
	again := f.idx
	refused("removed after a retry took it up", "only the run that created a record", structs.VolumeClaimRemoveType,
		&structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: "vol-sw", AllocID: "a1", ModifyIndex: again})
	// Confirmed taken by the same publish; a taken claim is never removed.
	f.must(structs.VolumeClaimType, with(func(c *structs.Claim) { c.State = structs.ClaimTaken }))
	if c := f.volume("default", "vol-sw").Claims["a1"]; c.State != structs.ClaimTaken || c.CreateIndex != idx {
		t.Fatalf("confirmed claim %+v: want taken, created at %d", c, idx)
	}
	refused("a taken claim removed", "is taken", structs.VolumeClaimRemoveType,
		&structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: "vol-sw", AllocID: "a1", ModifyIndex: f.volume("default", "vol-sw").Claims["a1"].ModifyIndex})

	// The run that created a record, unchanged since, removes it.
	own := f.publishing("vol-mw", "a2", structs.ClaimWrite)
	f.must(structs.VolumeClaimRemoveType, &structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: "vol-mw", AllocID: "a2", ModifyIndex: own})
	if c := f.volume("default", "vol-mw").Claims["a2"]; c != nil {
		t.Fatalf("the rolled-back record is still there: %+v", c)
	}
}

// The claim path marks its publishing record node_unpublished once its
// rollback stopped at a NodeUnstage whose answer was lost: only the very
// record it wrote, before any release, for a claim that staged; the mark
// then holds claims on the machine (Claim.UnstageInDoubt) and refuses a
// retry taking the record up.
func TestUnstageInDoubtMark(t *testing.T) {
	f := newFixture(t)
	rec := &structs.Claim{AllocID: "a5", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimPublishing,
		ExternalNodeID: "ext-n1", StagingPath: "/root/staging/vol-mw", TargetPath: "/root/per-alloc/a5/vol-mw"}
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw", Claim: rec})
	idx := f.idx
	mark := func(edit func(c *structs.Claim)) *structs.VolumeClaimRequest {
		c := rec.Copy()
		c.NodeUnpublished, c.ModifyIndex = true, idx
		edit(c)
		return &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw", Claim: c}
	}
	for _, tc := range []struct {
		name, want string
		edit       func(c *structs.Claim)
	}{
		{"another run's record", "only the run that wrote it", func(c *structs.Claim) { c.ModifyIndex = idx - 1 }},
		{"another publish", "another publish", func(c *structs.Claim) { c.TargetPath = "/elsewhere" }},
		{"a claim that staged nothing", "staged nothing", func(c *structs.Claim) { c.StagingPath = "" }},
		{"confirmed taken with the mark", "node_unpublished", func(c *structs.Claim) { c.State = structs.ClaimTaken }},
	} {
		before := f.volume("default", "vol-mw")
		if _, err := f.apply(structs.VolumeClaimType, mark(tc.edit)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
		if after := f.volume("default", "vol-mw"); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: the refused write changed the volume", tc.name)
		}
	}
	f.must(structs.VolumeClaimType, mark(func(*structs.Claim) {}))
	c := f.volume("default", "vol-mw").Claims["a5"]
	if c.State != structs.ClaimPublishing || !c.UnstageInDoubt() {
		t.Fatalf("the marked record %+v does not hold its unstage in doubt", c)
	}
	// A retry does not take it up, and a claim on its machine waits.
	retry := rec.Copy()
	if _, err := f.apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw", Claim: retry}); err == nil {
		t.Fatal("a retry took up a record whose rollback's unstage is in doubt")
	}
	other := &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimPublishing, ExternalNodeID: "ext-n1",
		StagingPath: "/root/staging/vol-mw", TargetPath: "/root/per-alloc/a1/vol-mw"}
	if _, err := f.apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw", Claim: other}); err == nil ||
		!strings.Contains(err.Error(), "sent NodeUnstageVolume") {
		t.Fatalf("a claim on the machine while the rollback's unstage is in doubt: %v", err)
	}
}
