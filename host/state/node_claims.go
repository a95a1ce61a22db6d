package state

import (
	"cmp"
	"slices"

	"github.com/volhost/volhost/host/structs"
)

// nodeClaims lists the claims on a node, by volume.
func nodeClaims(snap *Snapshot, nodeID string) ([]structs.NodeClaim, error) {
	vols, err := snap.VolumesClaimedOnNode(nil, nodeID)
	if err != nil {
		return nil, err
	}
	var out []structs.NodeClaim
	for _, v := range vols {
		for _, c := range v.Claims {
			if c.NodeID == nodeID {
				out = append(out, structs.NodeClaim{Namespace: v.Namespace, VolumeID: v.ID, AllocID: c.AllocID, State: c.State})
			}
		}
	}
	slices.SortFunc(out, func(a, b structs.NodeClaim) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.VolumeID, b.VolumeID), cmp.Compare(a.AllocID, b.AllocID))
	})
	return out, nil
}
