package attach

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
)

// testRequests is a claim as the claim path records it (every path and
// ID distinct, so a request naming the wrong one is seen) and the
// adapter's answer for its publish.
func testRequests() Requests {
	return Requests{
		Claim: &structs.Claim{
			AllocID: "a1", NodeID: "n1", Mode: structs.ClaimRead, ExternalNodeID: "ext-n1",
			PublishContext: map[string]string{"device": "/dev/sdb"},
			StagingPath:    "/root/csi/p/staging/ns/v", TargetPath: "/root/csi/p/per-alloc/a1/ns/v",
		},
		Answer: &abi.AdapterResponse{
			VolumeID: "ext-v", NodeID: "ext-n1", SecretKeys: []string{"k"},
			VolumeContext: map[string]string{"ctx": "1"},
		},
		Secrets: map[string]string{"k": "s"},
		Capability: &csipb.VolumeCapability{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
	}
}

// ids is what a step or its undo names on the driver: the volume, the
// node (controller steps) and the path (node steps).
type ids struct{ volume, node, staging, target string }

// Each undo names what its step named: the same volume ID, node ID,
// staging path or target path, and those are the claim's recorded ones,
// which a release reads back from committed state. A builder whose
// NodeUnstage used another staging path than NodeStage (or whose
// ControllerUnpublish another node ID than ControllerPublish) fails here.
func TestUndoNamesWhatItsStepNamed(t *testing.T) {
	r := testRequests()
	c := r.Claim
	for _, tc := range []struct {
		step, undo string
		stepIDs    func(Requests) ids
		undoIDs    func(Requests) ids
		want       ids
	}{
		{
			abi.StepControllerPublish, abi.StepControllerUnpublish,
			func(r Requests) ids { q := r.ControllerPublish(); return ids{volume: q.VolumeId, node: q.NodeId} },
			func(r Requests) ids { q := r.ControllerUnpublish(); return ids{volume: q.VolumeId, node: q.NodeId} },
			ids{volume: "ext-v", node: c.ExternalNodeID},
		},
		{
			"node-stage", abi.StepNodeUnstage,
			func(r Requests) ids { q := r.NodeStage(); return ids{volume: q.VolumeId, staging: q.StagingTargetPath} },
			func(r Requests) ids {
				q := r.NodeUnstage()
				return ids{volume: q.VolumeId, staging: q.StagingTargetPath}
			},
			ids{volume: "ext-v", staging: c.StagingPath},
		},
		{
			"node-publish", abi.StepNodeUnpublish,
			func(r Requests) ids { q := r.NodePublish(); return ids{volume: q.VolumeId, target: q.TargetPath} },
			func(r Requests) ids { q := r.NodeUnpublish(); return ids{volume: q.VolumeId, target: q.TargetPath} },
			ids{volume: "ext-v", target: c.TargetPath},
		},
	} {
		step := tc.stepIDs(r)
		if step != tc.want {
			t.Errorf("%s names %+v; want the claim's recorded %+v", tc.step, step, tc.want)
		}
		// The rollback's undo: the publish's own Requests.
		if undo := tc.undoIDs(r); undo != step {
			t.Errorf("rollback's %s names %+v; its %s named %+v", tc.undo, undo, tc.step, step)
		}
		// The release's undo: the claim as committed (a copy) and the
		// adapter's answer for the undo step, which Subject.Adapt holds
		// to the same volume and node IDs.
		rel := Requests{Claim: c.Copy(), Answer: &abi.AdapterResponse{VolumeID: r.Answer.VolumeID, NodeID: r.Answer.NodeID}}
		if undo := tc.undoIDs(rel); undo != step {
			t.Errorf("release's %s names %+v; the claim's %s named %+v", tc.undo, undo, tc.step, step)
		}
	}
}

// Every field of the six requests, as the claim path and the release
// sent them before the builder existed: the builder changes no request.
// Secrets travel with both controller steps, NodeStage and NodePublish;
// the capability with the publish steps; readonly with a read claim's
// ControllerPublish and NodePublish.
func TestRequestsFields(t *testing.T) {
	r := testRequests()
	c, a := r.Claim, r.Answer
	for _, tc := range []struct {
		name      string
		got, want proto.Message
	}{
		{"ControllerPublish", r.ControllerPublish(), &csipb.ControllerPublishVolumeRequest{
			VolumeId: a.VolumeID, NodeId: a.NodeID, VolumeCapability: r.Capability,
			Readonly: true, Secrets: r.Secrets, VolumeContext: a.VolumeContext,
		}},
		{"ControllerUnpublish", r.ControllerUnpublish(), &csipb.ControllerUnpublishVolumeRequest{
			VolumeId: a.VolumeID, NodeId: a.NodeID, Secrets: r.Secrets,
		}},
		{"NodeStage", r.NodeStage(), &csipb.NodeStageVolumeRequest{
			VolumeId: a.VolumeID, PublishContext: c.PublishContext, StagingTargetPath: c.StagingPath,
			VolumeCapability: r.Capability, Secrets: r.Secrets, VolumeContext: a.VolumeContext,
		}},
		{"NodeUnstage", r.NodeUnstage(), &csipb.NodeUnstageVolumeRequest{
			VolumeId: a.VolumeID, StagingTargetPath: c.StagingPath,
		}},
		{"NodePublish", r.NodePublish(), &csipb.NodePublishVolumeRequest{
			VolumeId: a.VolumeID, PublishContext: c.PublishContext, StagingTargetPath: c.StagingPath,
			TargetPath: c.TargetPath, VolumeCapability: r.Capability, Readonly: true, Secrets: r.Secrets,
			VolumeContext: a.VolumeContext,
		}},
		{"NodeUnpublish", r.NodeUnpublish(), &csipb.NodeUnpublishVolumeRequest{
			VolumeId: a.VolumeID, TargetPath: c.TargetPath,
		}},
	} {
		if !proto.Equal(tc.got, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, tc.got, tc.want)
		}
	}
	// A write claim is published read-write.
	c.Mode = structs.ClaimWrite
	if r.ControllerPublish().Readonly || r.NodePublish().Readonly {
		t.Errorf("a write claim published read-only")
	}
}
