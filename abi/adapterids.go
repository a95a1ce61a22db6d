package abi

import "fmt"

// CheckAdapterIDs bounds a csi-adapter's answer resp to req to what the
// host can verify, from the request's views alone: the volume ID must be
// the volume's external ID, and at a controller step a node ID must be the
// one the claim's steps go to. A module that names another disk or another
// instance would otherwise have it attached or detached under someone
// else's workload. The host (at publish and at release) and the module
// authoring kit share it: plugins sits below the watcher and cannot import
// it, and one rule in two copies drifts.
//
// At release that node ID is the one recorded on the claim when it was
// published (ClaimView.ExternalNodeID), and only that one: the node's
// current ID (NodeView.ExternalID) may name another machine (a replaced
// instance, an agent that reported another node's ID), whose
// ControllerUnpublish would detach a disk under its workload or answer OK
// for an attachment it never had. A claim that recorded none (published
// before the field existed, or while its node had no node endpoint) is
// held to the node's current one; host/structs.Claim.ReleaseNodeID is the
// same choice over committed state. At publish, the node's current ID;
// when the host knows none, the adapter's is the only one there is (the
// host records it on the claim and holds every later step to it).
//
// An empty node ID passes here: the host refuses it with its own message
// when it builds the call, and the kit reports it as bad output.
func CheckAdapterIDs(req *AdapterRequest, resp *AdapterResponse) error {
	v := req.Volume
	if resp.VolumeID != v.ExternalID {
		return fmt.Errorf("answered volume ID %q for %s of volume %s/%s, whose external ID is %q",
			resp.VolumeID, req.Step, v.Namespace, v.ID, v.ExternalID)
	}
	if req.Step != StepControllerPublish && req.Step != StepControllerUnpublish {
		return nil // node steps send no node ID
	}
	known, recorded := req.Node.ExternalID, false
	if req.Step != StepControllerPublish && req.Claim.ExternalNodeID != "" {
		known, recorded = req.Claim.ExternalNodeID, true
	}
	switch {
	case resp.NodeID == "", resp.NodeID == known:
		return nil
	case known == "" && req.Step == StepControllerPublish:
		return nil
	case known == "":
		return fmt.Errorf("answered node ID %q for %s of node %q, for which the host knows no external node ID to check it against",
			resp.NodeID, req.Step, req.Claim.NodeID)
	case recorded:
		return fmt.Errorf("answered node ID %q for %s of node %q, whose external node ID is %q (recorded on the claim at publish)",
			resp.NodeID, req.Step, req.Claim.NodeID, known)
	}
	return fmt.Errorf("answered node ID %q for %s of node %q, whose external node ID is %q",
		resp.NodeID, req.Step, req.Claim.NodeID, known)
}
