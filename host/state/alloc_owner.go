package state

import (
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// checkAllocOwner holds an allocation write to its owner: the API
// (source "", PUT /v1/allocs) or one scheduler source (its sync). A
// writer names itself as the allocation's source and changes only the
// allocations it registered. An API write ending an allocation Nomad
// mirrors would have the watcher release its claims while Nomad still
// runs it (RATIONALE.md "Safety": never release under a running
// allocation); a sync changing an allocation registered through the API
// would do the same to the API's.
func checkAllocOwner(snap *Snapshot, f string, a *structs.Alloc, source string) error {
	old, err := snap.AllocByID(nil, a.ID)
	if err != nil {
		return err
	}
	if old != nil && old.Source != source {
		writer := "the API's"
		if source != "" {
			writer = fmt.Sprintf("scheduler %q's", source)
		}
		return structs.Conflict("allocation %q was registered by %s: it is not %s to change (it ends when its owner reports it ended)",
			a.ID, ownerOf(old), writer)
	}
	if a.Source != source {
		if source == "" {
			return structs.Invalid(f+".source", "must be empty: %q names a scheduler source, and only that source's sync writes its allocations", a.Source)
		}
		return structs.Invalid(f+".source", "must be %q, the syncing source, got %q", source, a.Source)
	}
	return nil
}

// validateAllocWrites holds allocation writes to two rules before they
// reach the log: an API write changes only the API's allocations
// (checkAllocOwner), and no write moves an allocation to another
// namespace (its claims were checked against the namespace it had). They
// are checked before the log only, like the rule of new IDs
// (ingress.go): entries an earlier version committed replay as they
// applied then.
func validateAllocWrites(snap *Snapshot, t structs.MessageType, req any) error {
	var allocs []*structs.Alloc
	switch t {
	case structs.AllocUpsertType:
		r, err := asReq[structs.AllocUpsertRequest](req)
		if err != nil {
			return nil // the request's own validation says why
		}
		for i, a := range r.Allocs {
			if a == nil {
				continue
			}
			if err := checkAllocOwner(snap, fmt.Sprintf("allocs[%d]", i), a, ""); err != nil {
				return err
			}
		}
		allocs = r.Allocs
	case structs.SchedulerSyncType:
		r, err := asReq[structs.SchedulerSyncRequest](req)
		if err != nil {
			return nil
		}
		allocs = r.Allocs
	}
	for i, a := range allocs {
		if a == nil {
			continue
		}
		old, err := snap.AllocByID(nil, a.ID)
		if err != nil {
			return err
		}
		if old != nil && old.Namespace != a.Namespace {
			return structs.Invalid(fmt.Sprintf("allocs[%d].namespace", i), "allocation %q is in namespace %q and cannot move to %q", a.ID, old.Namespace, a.Namespace)
		}
	}
	return nil
}
