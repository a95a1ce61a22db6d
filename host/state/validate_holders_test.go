package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// The claim's record of its publish is the store's: set when the claim is
// committed (Unattached from the plugin then), and no checkpoint changes
// it; Restored is never cleared.
func TestPublishRecordIsKept(t *testing.T) {
	f := newFixture(t)
	f.publishedClaim("vol-mw", "a1", "n1", "i-0001")
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-ro",
		Claim: &structs.Claim{AllocID: "a2", NodeID: "n2", Mode: structs.ClaimRead, ExternalNodeID: "n2"}})
	if c := f.volume("default", "vol-mw").Claims["a1"]; c.Unattached {
		t.Fatal("a claim of a plugin with PUBLISH_UNPUBLISH_VOLUME is recorded unattached")
	}
	if c := f.volume("default", "vol-ro").Claims["a2"]; !c.Unattached {
		t.Fatal("a claim of a plugin without PUBLISH_UNPUBLISH_VOLUME is not recorded unattached")
	}

	before := f.volume("default", "vol-mw").Claims["a1"]
	c := before.Copy()
	c.StagingPath, c.TargetPath, c.ExternalNodeID, c.Unattached = "/elsewhere", "/elsewhere/t", "i-0009", true
	c.Attempts = 1
	f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw", Claim: c})
	after := f.volume("default", "vol-mw").Claims["a1"]
	if after.Attempts != 1 || after.StagingPath != before.StagingPath || after.TargetPath != before.TargetPath ||
		after.ExternalNodeID != before.ExternalNodeID || after.Unattached {
		t.Fatalf("a checkpoint rewrote the publish record: %+v -> %+v", before, after)
	}
}

// A plugin cannot lose PUBLISH_UNPUBLISH_VOLUME while a claim of one of
// its volumes holds an attachment (its release must detach it); it may
// gain it, and lose it again once the claim is past its controller step.
func TestPluginUpsertUnderAttachedClaims(t *testing.T) {
	f := newFixture(t)
	f.publishedClaim("vol-mw", "a1", "n1", "i-0001")
	noController := &structs.Plugin{ID: "ebs", Provider: "ebs.csi.example"}
	before := f.digest()
	_, err := f.apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: noController})
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), `the claim of allocation "a1" on volume "default/vol-mw" holds a controller attachment`) ||
		!strings.Contains(err.Error(), "drain the claims first") {
		t.Fatalf("plugin upsert dropping the controller under an attached claim: %v", err)
	}
	if f.digest() != before {
		t.Fatal("the refused upsert changed the state")
	}
	f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "nfs", ControllerEndpoint: "tcp://10.0.0.9:9000",
		Capabilities: structs.ControllerCapabilities{PublishUnpublish: true}}})

	f.setAlloc("a1", structs.AllocComplete)
	for _, st := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached} {
		if err := f.checkpoint("vol-mw", "a1", st); err != nil {
			t.Fatal(err)
		}
	}
	f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: noController})
}

// A new claim of a volume waits while a release's NodeUnstage of it on
// the same machine is in doubt (no definitive driver answer yet); another
// machine, or a definitive answer, lets it through.
func TestClaimRefusedWhileUnstageInDoubt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		last    *structs.ClaimError // a1's last error after node_unpublished
		node    string              // where a2 claims
		refused bool
	}{
		{"unstage sent, no answer recorded", nil, "n1", true},
		{"answer lost", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "node-unstage", Code: 14, CodeName: "Unavailable"}, "n1", true},
		{"deadline", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "node-unstage", Code: 4, CodeName: "DeadlineExceeded"}, "n1", true},
		{"operation pending", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "node-unstage", Code: 10, CodeName: "Aborted"}, "n1", true},
		{"a module fault on a later attempt", &structs.ClaimError{Kind: structs.ErrorModule, Step: "adapter", Message: "trap"}, "n1", true},
		{"the driver refused the unstage", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "node-unstage", Code: 13, CodeName: "Internal"}, "n1", false},
		{"the driver refused the unstage, which was sent again", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "node-unstage", Code: 13, CodeName: "Internal", Resent: true}, "n1", true},
		{"another machine", nil, "n2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.publishedClaim("vol-mw", "a1", "n1", "i-0001")
			f.setAlloc("a1", structs.AllocComplete)
			c := f.volume("default", "vol-mw").Claims["a1"].Copy()
			c.NodeUnpublished, c.LastError = true, tc.last
			f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw", Claim: c})
			alloc := map[string]string{"n1": "a5", "n2": "a2"}[tc.node]
			ext := map[string]string{"n1": "i-0001", "n2": "i-0002"}[tc.node]
			req := &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw",
				Claim: &structs.Claim{AllocID: alloc, NodeID: tc.node, Mode: structs.ClaimWrite}}
			// Before the claim path's first CSI call (no external node ID
			// yet: the node's current one decides the machine)...
			err := f.s.Snapshot().Validate(structs.VolumeClaimType, req)
			if got := errors.Is(err, structs.ErrConflict); got != tc.refused {
				t.Fatalf("validate: %v, refused %v, want %v", err, got, tc.refused)
			}
			if tc.refused && !strings.Contains(err.Error(), `the release of allocation "a1" on node "n1" (the same machine) sent NodeUnstageVolume`) {
				t.Fatalf("the refusal does not say why: %v", err)
			}
			// ...and at commit, with the ID the publish recorded.
			req.Claim.ExternalNodeID = ext
			_, err = f.apply(structs.VolumeClaimType, req)
			if got := errors.Is(err, structs.ErrConflict); got != tc.refused {
				t.Fatalf("commit: %v, refused %v, want %v", err, got, tc.refused)
			}
		})
	}
}

// A new claim of a volume waits while a release's ControllerUnpublish of
// it to the same machine is in doubt (node-detached, no definitive driver
// answer yet): the detach may end under the new claim's mount. Another
// machine, a definitive answer, or a claim that attached nothing lets it
// through.
func TestClaimRefusedWhileDetachInDoubt(t *testing.T) {
	if (&structs.Claim{State: structs.ClaimNodeDetached, Unattached: true}).DetachInDoubt() {
		t.Fatal("a claim that attached nothing has a detach in doubt")
	}
	for _, tc := range []struct {
		name    string
		last    *structs.ClaimError // a1's last error once node-detached
		node    string              // where the new claim is made
		refused bool
	}{
		{"detach sent, no answer recorded", nil, "n1", true},
		{"answer lost", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "controller-unpublish", Code: 4, CodeName: "DeadlineExceeded"}, "n1", true},
		{"operation pending", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "controller-unpublish", Code: 10, CodeName: "Aborted"}, "n1", true},
		{"a module fault on a later attempt", &structs.ClaimError{Kind: structs.ErrorModule, Step: "adapter", Message: "trap"}, "n1", true},
		{"the driver refused the detach", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "controller-unpublish", Code: 13, CodeName: "Internal"}, "n1", false},
		{"the driver refused the detach, which was sent again", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "controller-unpublish", Code: 13, CodeName: "Internal", Resent: true}, "n1", true},
		{"another machine", nil, "n2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.publishedClaim("vol-mw", "a1", "n1", "i-0001")
			f.setAlloc("a1", structs.AllocComplete)
			c := f.volume("default", "vol-mw").Claims["a1"].Copy()
			c.State, c.LastError = structs.ClaimNodeDetached, tc.last
			f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw", Claim: c})
			alloc := map[string]string{"n1": "a5", "n2": "a2"}[tc.node]
			ext := map[string]string{"n1": "i-0001", "n2": "i-0002"}[tc.node]
			req := &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw",
				Claim: &structs.Claim{AllocID: alloc, NodeID: tc.node, Mode: structs.ClaimWrite}}
			err := f.s.Snapshot().Validate(structs.VolumeClaimType, req)
			if got := errors.Is(err, structs.ErrConflict); got != tc.refused {
				t.Fatalf("validate: %v, refused %v, want %v", err, got, tc.refused)
			}
			if tc.refused && !strings.Contains(err.Error(), `the release of allocation "a1" on node "n1" (the same machine) sent ControllerUnpublishVolume`) {
				t.Fatalf("the refusal does not say why: %v", err)
			}
			req.Claim.ExternalNodeID = ext
			_, err = f.apply(structs.VolumeClaimType, req)
			if got := errors.Is(err, structs.ErrConflict); got != tc.refused {
				t.Fatalf("commit: %v, refused %v, want %v", err, got, tc.refused)
			}
		})
	}
}
