package kit

import (
	"fmt"

	"github.com/volhost/volhost/abi"
)

// The host's checks on an answer, over the view alone. They are the
// host's (watcher/release.go: decide, classify; watcher/attach:
// Subject.Adapt, at publish and release), which run on committed state;
// here the view is all there is, and it carries the same facts (an allocation's status, a node's status,
// the external IDs the host knows). The plugins.Manager has already checked
// what needs no state (one decision per claim of the request, known actions
// and outcomes, no negative waits).

// terminal reports whether an allocation status lets its claim be released:
// the allocation ended (complete, failed, lost) or is gone.
func terminal(status string) bool {
	switch status {
	case "complete", "failed", "lost", "gone":
		return true
	}
	return false
}

func checkPolicy(req *abi.PolicyRequest, resp *abi.PolicyResponse) error {
	status := make(map[string]string, len(req.Allocs))
	for _, a := range req.Allocs {
		status[a.ID] = a.ClientStatus
	}
	nodeOf := make(map[string]string, len(req.Claims))
	for _, c := range req.Claims {
		nodeOf[c.AllocID] = c.NodeID
	}
	nodeStatus := make(map[string]string, len(req.Nodes))
	for _, n := range req.Nodes {
		nodeStatus[n.ID] = n.Status
	}
	for _, d := range resp.Decisions {
		if d.Action != abi.ActionRelease && d.Action != abi.ActionReleaseSkipNode {
			continue
		}
		st, ok := status[d.AllocID]
		if !ok {
			st = "gone"
		}
		if !terminal(st) {
			return &hostFault{FaultUnsafe, fmt.Sprintf("decided to release the claim of allocation %q, which is %s", d.AllocID, st)}
		}
		if d.Action == abi.ActionReleaseSkipNode {
			node := nodeOf[d.AllocID]
			if ns, ok := nodeStatus[node]; ok && ns != "down" && ns != "gone" {
				return &hostFault{FaultUnsafe, fmt.Sprintf("decided to skip the node step of allocation %q on node %q, which is %s", d.AllocID, node, ns)}
			}
		}
	}
	return nil
}

// checkAdapter is the host's check of an adapter's answer (watcher/attach:
// Subject.Adapt): no volume ID, or no node ID at a controller step (the
// host always sends one), is bad output; IDs the host cannot verify are
// unsafe, by the rule the host applies (abi.CheckAdapterIDs).
func checkAdapter(req *abi.AdapterRequest, resp *abi.AdapterResponse) error {
	if resp.VolumeID == "" {
		return &hostFault{FaultBadOutput, "empty volume ID"}
	}
	if resp.NodeID == "" && (req.Step == abi.StepControllerPublish || req.Step == abi.StepControllerUnpublish) {
		return &hostFault{FaultBadOutput, fmt.Sprintf("empty node ID for %s: the host always sends one", req.Step)}
	}
	if err := abi.CheckAdapterIDs(req, resp); err != nil {
		return &hostFault{FaultUnsafe, err.Error()}
	}
	return nil
}

func checkClassify(req *abi.ClassifyRequest, resp *abi.ClassifyResponse) error {
	if resp.Outcome == abi.OutcomeDone {
		return &hostFault{FaultUnsafe, fmt.Sprintf("classified the failed %s (code %d: %s) as done; a failed step is never done",
			req.Step, req.Code, req.Message)}
	}
	return nil
}
