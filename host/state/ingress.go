package state

import (
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// Two ID rules, one for each side of the log. An ID that enters the
// cluster (a volume, node, plugin, allocation or ACL policy that does not
// exist yet) obeys structs.ValidateID, the strict ASCII allowlist, checked
// by the leader before the entry is written (Snapshot.Validate). Once
// committed, an ID is judged by structs.ValidateStoredID (validID), the
// rule of the versions before the allowlist: an upgraded server replays
// the log and restores the snapshots an earlier version wrote, and a
// volume "vol+1" committed then keeps its claims released, its
// allocations updated and its node reconnecting. Refusing such an entry
// at apply would stop the replica that replays it, or make it diverge
// from one that applied it under the old rule.

// validID is the rule for committed IDs, applied wherever a write is
// validated (before the log and again when it is applied).
var validID = structs.ValidateStoredID

// validIDIn is validID of the field f+name, that name built only for a
// refusal: a restore checks the IDs of a million volumes.
func validIDIn(f, name, id string) error {
	if validID("", id) == nil {
		return nil
	}
	return validID(f+name, id)
}

// validateNewIDs holds the IDs a pre-log request creates to the strict
// rule. IDs that name rows already stored, or other tables' rows, were
// checked when those rows were created.
func validateNewIDs(snap *Snapshot, t structs.MessageType, req any) error {
	switch t {
	case structs.VolumeRegisterType:
		r, err := asReq[structs.VolumeRegisterRequest](req)
		if err != nil {
			return nil // the request's own validation says why
		}
		for i, v := range r.Volumes {
			if v == nil {
				continue
			}
			if old, err := snap.VolumeByID(nil, v.Namespace, v.ID); err != nil || old != nil {
				continue
			}
			f := fmt.Sprintf("volumes[%d]", i)
			if err := structs.ValidateID(f+".namespace", v.Namespace); err != nil {
				return err
			}
			if err := structs.ValidateID(f+".id", v.ID); err != nil {
				return err
			}
		}
	case structs.NodeUpsertType:
		r, err := asReq[structs.NodeUpsertRequest](req)
		if err != nil || r.Node == nil {
			return nil
		}
		if old, err := snap.NodeByID(nil, r.Node.ID); err == nil && old == nil {
			return structs.ValidateID("node.id", r.Node.ID)
		}
	case structs.PluginUpsertType:
		r, err := asReq[structs.PluginUpsertRequest](req)
		if err != nil || r.Plugin == nil {
			return nil
		}
		if old, err := snap.PluginByID(nil, r.Plugin.ID); err == nil && old == nil {
			return structs.ValidateID("plugin.id", r.Plugin.ID)
		}
	case structs.AllocUpsertType:
		r, err := asReq[structs.AllocUpsertRequest](req)
		if err != nil {
			return nil
		}
		for i, a := range r.Allocs {
			if a == nil {
				continue
			}
			if old, err := snap.AllocByID(nil, a.ID); err != nil || old != nil {
				continue
			}
			f := fmt.Sprintf("allocs[%d]", i)
			if err := structs.ValidateID(f+".id", a.ID); err != nil {
				return err
			}
			if a.Namespace != "" {
				if err := structs.ValidateID(f+".namespace", a.Namespace); err != nil {
					return err
				}
			}
		}
	case structs.ACLPolicyUpsertType:
		r, err := asReq[structs.ACLPolicyUpsertRequest](req)
		if err != nil {
			return nil
		}
		for i, p := range r.Policies {
			if p == nil {
				continue
			}
			if old, err := snap.ACLPolicyByName(nil, p.Name); err != nil || old != nil {
				continue
			}
			if err := structs.ValidateID(fmt.Sprintf("policies[%d].name", i), p.Name); err != nil {
				return err
			}
		}
	}
	return nil
}
