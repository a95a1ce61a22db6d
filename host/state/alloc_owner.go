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
//
// It is part of each writer's op validation (validateAPIAllocUpsert,
// validateSchedulerSync), so it runs before the log and again when the
// entry is applied: of an API write and a sync that both registered one
// new allocation ID, both passing the check before the log, the one
// applied second is refused and changes nothing.
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

// validateAPIAllocUpsert is the validation of an API allocation write
// (AllocUpsertType): the owner first, so a write to a scheduler's
// allocation is told whose it is whatever else it changes, then every
// allocation rule (validateAllocUpsert, which a sync obeys too).
func validateAPIAllocUpsert(snap *Snapshot, r *structs.AllocUpsertRequest) error {
	for i, a := range r.Allocs {
		if a == nil {
			continue // validateAllocUpsert says why
		}
		if err := checkAllocOwner(snap, fmt.Sprintf("allocs[%d]", i), a, ""); err != nil {
			return err
		}
	}
	return validateAllocUpsert(snap, r)
}

func ownerOf(a *structs.Alloc) string {
	if a.Source == "" {
		return "the API"
	}
	return fmt.Sprintf("scheduler %q", a.Source)
}
