package attach

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
)

// Requests builds the CSI requests of one claim's six steps: the claim
// path's ControllerPublish, NodeStage and NodePublish, and the undo of
// each (NodeUnpublish, NodeUnstage, ControllerUnpublish), which the claim
// path's rollback and the release both send. A step and its undo are
// built here from the same fields, so the paths and IDs of an undo cannot
// drift from the step it undoes, whichever direction sends it: a
// NodeUnstage at another path than the NodeStage leaves the volume staged
// (and the disk detached under it); a ControllerUnpublish with another
// node ID detaches another machine's disk.
//
// What each request names comes from two places only:
//   - the claim's record (Claim): the staging and target paths and the
//     publish context, which the claim path decides before it writes the
//     claim ahead and the release reads back from committed state (CSI
//     spec: NodeStage and NodeUnstage at one staging_target_path per
//     volume per node, NodePublish and NodeUnpublish at one target_path);
//   - the adapter's answer for the step (Answer, bounded by Subject.Adapt):
//     the driver's volume ID, node ID and volume context.
//
// Secrets (attach.Secrets of the answer's keys) travel with
// ControllerPublish, NodeStage, NodePublish and ControllerUnpublish; the
// CSI spec gives NodeUnstage and NodeUnpublish no secrets field.
// Capability (host/csi.Capability of the claim's modes) travels with the
// three publish steps only.
type Requests struct {
	Claim      *structs.Claim
	Answer     *abi.AdapterResponse
	Secrets    map[string]string
	Capability *csipb.VolumeCapability
}

// readonly: a read claim is published read-only (CSI spec: readonly on
// ControllerPublish and NodePublish).
func (r Requests) readonly() bool { return r.Claim.Mode == structs.ClaimRead }

// ControllerPublish attaches the volume to the answer's node.
func (r Requests) ControllerPublish() *csipb.ControllerPublishVolumeRequest {
	return &csipb.ControllerPublishVolumeRequest{
		VolumeId: r.Answer.VolumeID, NodeId: r.Answer.NodeID, VolumeCapability: r.Capability,
		Readonly: r.readonly(), Secrets: r.Secrets, VolumeContext: r.Answer.VolumeContext,
	}
}

// ControllerUnpublish undoes ControllerPublish: the same volume ID and
// node ID. Its callers send it only after every node step on the machine
// (CSI spec).
func (r Requests) ControllerUnpublish() *csipb.ControllerUnpublishVolumeRequest {
	return &csipb.ControllerUnpublishVolumeRequest{
		VolumeId: r.Answer.VolumeID, NodeId: r.Answer.NodeID, Secrets: r.Secrets,
	}
}

// NodeStage stages the volume at the claim's staging path, with the
// publish context its ControllerPublish answered (read when called:
// build it after that call).
func (r Requests) NodeStage() *csipb.NodeStageVolumeRequest {
	return &csipb.NodeStageVolumeRequest{
		VolumeId: r.Answer.VolumeID, PublishContext: r.Claim.PublishContext, StagingTargetPath: r.Claim.StagingPath,
		VolumeCapability: r.Capability, Secrets: r.Secrets, VolumeContext: r.Answer.VolumeContext,
	}
}

// NodeUnstage undoes NodeStage: the same volume ID and staging path.
func (r Requests) NodeUnstage() *csipb.NodeUnstageVolumeRequest {
	return &csipb.NodeUnstageVolumeRequest{
		VolumeId: r.Answer.VolumeID, StagingTargetPath: r.Claim.StagingPath,
	}
}

// NodePublish publishes the volume at the claim's target path, from its
// staging path ("" when the plugin does not stage).
func (r Requests) NodePublish() *csipb.NodePublishVolumeRequest {
	return &csipb.NodePublishVolumeRequest{
		VolumeId: r.Answer.VolumeID, PublishContext: r.Claim.PublishContext, StagingTargetPath: r.Claim.StagingPath,
		TargetPath: r.Claim.TargetPath, VolumeCapability: r.Capability, Readonly: r.readonly(), Secrets: r.Secrets,
		VolumeContext: r.Answer.VolumeContext,
	}
}

// NodeUnpublish undoes NodePublish: the same volume ID and target path.
func (r Requests) NodeUnpublish() *csipb.NodeUnpublishVolumeRequest {
	return &csipb.NodeUnpublishVolumeRequest{
		VolumeId: r.Answer.VolumeID, TargetPath: r.Claim.TargetPath,
	}
}
