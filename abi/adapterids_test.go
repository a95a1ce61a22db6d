package abi

import (
	"strings"
	"testing"
)

// TestCheckAdapterIDs is the one table of the adapter ID rule the host and
// the module kit share: a volume ID other than the volume's external ID is
// refused at every step; at a controller step the node ID must be the
// claim's recorded one at release (not the node's current one, which may
// name another machine), the node's current one at publish, and is taken
// as given only at a publish where the host knows none.
func TestCheckAdapterIDs(t *testing.T) {
	const disk, rec, cur = "disk-1", "ext-recorded", "ext-current"
	req := func(step, recorded, current string) *AdapterRequest {
		return &AdapterRequest{
			Step:   step,
			Volume: VolumeView{Namespace: "default", ID: "vol1", ExternalID: disk},
			Claim:  ClaimView{AllocID: "a1", NodeID: "n1", ExternalNodeID: recorded},
			Node:   NodeView{ID: "n1", ExternalID: current},
		}
	}
	for _, tc := range []struct {
		name              string
		step              string
		recorded, current string
		volumeID, nodeID  string
		want              string // "" accepts; else part of the refusal
	}{
		{"node step, its disk", StepNodeUnpublish, rec, cur, disk, "", ""},
		{"node step, node ID not looked at", StepNodeUnstage, rec, cur, disk, "anything", ""},
		{"node step, another disk", StepNodeUnstage, rec, cur, "disk-2", "", `answered volume ID "disk-2" for node-unstage of volume default/vol1, whose external ID is "disk-1"`},
		{"controller step, another disk", StepControllerUnpublish, rec, cur, "disk-2", rec, `whose external ID is "disk-1"`},
		{"release, recorded node ID", StepControllerUnpublish, rec, cur, disk, rec, ""},
		{"release, the node's current ID instead of the recorded one", StepControllerUnpublish, rec, cur, disk, cur,
			`answered node ID "ext-current" for controller-unpublish of node "n1", whose external node ID is "ext-recorded" (recorded on the claim at publish)`},
		{"release, nothing recorded: the current ID", StepControllerUnpublish, "", cur, disk, cur, ""},
		{"release, nothing recorded, another ID", StepControllerUnpublish, "", cur, disk, "ext-other",
			`whose external node ID is "ext-current"`},
		{"release, no ID known at all", StepControllerUnpublish, "", "", disk, "ext-other", "knows no external node ID"},
		{"publish, the current ID", StepControllerPublish, rec, cur, disk, cur, ""},
		{"publish, a recorded ID does not count", StepControllerPublish, rec, cur, disk, rec, `whose external node ID is "ext-current"`},
		{"publish, no ID known: the adapter's", StepControllerPublish, "", "", disk, "ext-adapter", ""},
		{"empty node ID left to the caller", StepControllerUnpublish, rec, cur, disk, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAdapterIDs(req(tc.step, tc.recorded, tc.current), &AdapterResponse{VolumeID: tc.volumeID, NodeID: tc.nodeID})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want a refusal containing %q", err, tc.want)
			}
		})
	}
}
