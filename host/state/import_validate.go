package state

import (
	"fmt"
	"maps"
	"slices"

	"github.com/volhost/volhost/host/structs"
)

// validateRow checks one row of an imported snapshot with the rules of the
// write that created it (validate.go), run against the rows already
// imported. A row is only ever the result of valid writes, so the checks
// are the write's checks minus what a later legal write may have undone:
// a node may name a plugin deregistered since (plugin deregistration only
// checks volumes), a terminal allocation may sit on a node deregistered
// since, a claim's allocation may have been deleted (gone counts as done).
func validateRow(snap *Snapshot, table string, row any) error {
	switch r := row.(type) {
	case *indexRow:
		if !slices.Contains(persistTables, r.Key) {
			return structs.Invalid("index.key", "unknown table %q", r.Key)
		}
		return nil
	case *structs.Plugin:
		return validatePluginUpsert(snap, &structs.PluginUpsertRequest{Plugin: r})
	case *structs.Node:
		return validateNodeRow(snap, r)
	case *structs.Alloc:
		return validateAllocRow(snap, r)
	case *structs.Volume:
		return validateVolumeRow(snap, r)
	case *structs.Leftover:
		return validateLeftoverRow(r)
	case *eventRow:
		if r.Seq == 0 {
			return structs.Invalid("event.seq", "must be > 0")
		}
		return validateEvents(snap, &structs.EventAppendRequest{Events: []*structs.Event{r.Event}})
	case *structs.ACLPolicy:
		return validateACLPolicyUpsert(snap, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{r}})
	case *structs.ACLToken:
		// Policies come before tokens (persistTables), so a token naming
		// a policy the snapshot lacks is refused like the write would be.
		return validateToken(snap, "acl_token", r)
	case *structs.SchedulerCursor:
		if err := validID("scheduler.source", r.Source); err != nil {
			return err
		}
		return nil
	case *aclBootstrapRow:
		if r.Key != bootstrapKey {
			return structs.Invalid("acl_bootstrap.key", "must be %q, got %q", bootstrapKey, r.Key)
		}
		return nil
	}
	return fmt.Errorf("%s: unexpected row type %T", table, row)
}

// validateNodeRow runs the node upsert checks on the plugins that still
// exist, and the shape checks alone on those that do not.
func validateNodeRow(snap *Snapshot, n *structs.Node) error {
	present := *n
	present.Plugins = make(map[string]*structs.NodePlugin, len(n.Plugins))
	keys := slices.Sorted(maps.Keys(n.Plugins))
	for _, k := range keys {
		p, err := snap.PluginByID(nil, k)
		if err != nil {
			return err
		}
		if p != nil {
			present.Plugins[k] = n.Plugins[k]
			continue
		}
		f := fmt.Sprintf("node.plugins[%s]", k)
		if err := validID(f, k); err != nil {
			return err
		}
		np := n.Plugins[k]
		if np == nil {
			return structs.Invalid(f, "is null")
		}
		if np.PluginID != k {
			return structs.Invalid(f+".plugin_id", "is %q but must equal its key %q", np.PluginID, k)
		}
	}
	// Shapes only: a snapshot from before the one-machine-one-node check
	// may hold two nodes with one external node ID, and a restore must not
	// lose them; the claims on them are told apart by the ID recorded on
	// each claim (structs.SameMachine), so they stay safe.
	return validateNodeShape(snap, &structs.NodeUpsertRequest{Node: &present})
}

func validateAllocRow(snap *Snapshot, a *structs.Alloc) error {
	if a.ClientStatus.Terminal() {
		n, err := snap.NodeByID(nil, a.NodeID)
		if err != nil {
			return err
		}
		if n == nil {
			// The node was deregistered after the allocation ended: check
			// the allocation's own fields only.
			if err := validID("alloc.id", a.ID); err != nil {
				return err
			}
			if a.Namespace != "" {
				if err := validID("alloc.namespace", a.Namespace); err != nil {
					return err
				}
			}
			return validID("alloc.node_id", a.NodeID)
		}
	}
	return validateAllocUpsert(snap, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{a}, KeepNamespace: true})
}

// validateVolumeRow runs the registration checks on the volume without its
// claims and stuck mark (registration refuses both: they come from later
// writes), then each claim's own checks.
func validateVolumeRow(snap *Snapshot, v *structs.Volume) error {
	// Shapes only: a snapshot from before the one-volume-per-disk check
	// may hold two volumes on one disk, and a restore must not lose them.
	// Nor the check against an earlier registration: a row is not one
	// (and the rows before it are of other tables, sameTableFree). The
	// errors name it as the registration's first volume.
	if err := validVolumeShape(snap, volumesField(0), v); err != nil {
		return err
	}
	for _, id := range v.ClaimIDs() {
		c := v.Claims[id]
		f := fmt.Sprintf("claims[%s]", id)
		switch {
		case c == nil:
			return structs.Invalid(f, "is null")
		case c.AllocID != id:
			return structs.Invalid(f+".alloc_id", "is %q but must equal its key %q", c.AllocID, id)
		case !c.Mode.Valid():
			return structs.Invalid(f+".mode", "unknown claim mode %q", c.Mode)
		case !c.State.Valid():
			return structs.Invalid(f+".state", "unknown claim state %q", c.State)
		case c.Attempts < 0:
			return structs.Invalid(f+".attempts", "must not be negative")
		case c.RecordProblem() != "":
			return structs.Invalid(f, "%s", c.RecordProblem())
		}
		if err := validIDIn(f, ".alloc_id", c.AllocID); err != nil {
			return err
		}
		if err := validIDIn(f, ".node_id", c.NodeID); err != nil {
			return err
		}
		// The claim's allocation may have been deleted since (gone
		// counts as done), but one that is still there runs where the
		// claim says: a claim never moves, an allocation never moves.
		a, err := snap.AllocByID(nil, id)
		if err != nil {
			return err
		}
		if a != nil && a.NodeID != c.NodeID {
			return structs.Invalid(f+".node_id", "is %q but allocation %q runs on node %q", c.NodeID, id, a.NodeID)
		}
		if a != nil && a.Namespace != "" && a.Namespace != v.Namespace {
			return structs.Invalid(f+".alloc_id", "allocation %q is in namespace %q, the volume in %q", id, a.Namespace, v.Namespace)
		}
	}
	if v.Stuck != nil && v.Stuck.Reason == "" {
		return structs.Invalid("stuck.reason", "must not be empty")
	}
	return nil
}

func validateLeftoverRow(l *structs.Leftover) error {
	if l.ID == "" {
		return structs.Invalid("leftover.id", "must not be empty")
	}
	if err := validateVolumeRef("leftover.", l.Namespace, l.VolumeID); err != nil {
		return err
	}
	if err := validID("leftover.alloc_id", l.AllocID); err != nil {
		return err
	}
	if err := validID("leftover.node_id", l.NodeID); err != nil {
		return err
	}
	if !l.State.Valid() {
		return structs.Invalid("leftover.state", "unknown claim state %q", l.State)
	}
	return nil
}
