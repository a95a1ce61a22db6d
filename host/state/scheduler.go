package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// Scheduler sources (host/scheduler): the cursor of each source and the
// sync write that mirrors a batch of its allocations. The rules a source
// must not break are checked here, where the batch is committed, not in
// the bridge: a cursor never goes backwards unless the scheduler reset, a
// source writes only the allocations it owns (never one an operator
// registered: checkAllocOwner), and the allocations obey every
// allocation upsert rule (terminal is for good, no move between nodes or
// namespaces). Apply checks them again, so a sync that raced an API write
// of the same new allocation is refused if the API's was applied first.

// TableSchedulers holds one structs.SchedulerCursor per source.
const TableSchedulers = "schedulers"

func init() {
	ops[structs.SchedulerSyncType] = mkOp(validateSchedulerSync, (*writer).schedulerSync)
}

func addSchedulerTables(tables map[string]*memdb.TableSchema) {
	tables[TableSchedulers] = &memdb.TableSchema{Name: TableSchedulers, Indexes: map[string]*memdb.IndexSchema{
		indexID: {Name: indexID, Unique: true, Indexer: stringKey("Source", func(c *structs.SchedulerCursor) string { return c.Source })},
	}}
}

// SchedulerCursor returns source's cursor (nil: it never synced).
func (snap *Snapshot) SchedulerCursor(ws memdb.WatchSet, source string) (*structs.SchedulerCursor, error) {
	return first[*structs.SchedulerCursor](snap, ws, TableSchedulers, indexID, source)
}

// SchedulerCursors lists every source's cursor, by source.
func (snap *Snapshot) SchedulerCursors(ws memdb.WatchSet) ([]*structs.SchedulerCursor, error) {
	return get[*structs.SchedulerCursor](snap, ws, TableSchedulers, indexID)
}

func validateSchedulerSync(snap *Snapshot, r *structs.SchedulerSyncRequest) error {
	if err := validID("source", r.Source); err != nil {
		return err
	}
	if r.Time.IsZero() {
		return structs.Invalid("time", "is required")
	}
	cur, err := snap.SchedulerCursor(nil, r.Source)
	if err != nil {
		return err
	}
	if cur != nil && r.Index < cur.Index && !r.Reset {
		// A stale writer (or a bridge that lost its place) would replay
		// changes the state has moved past: refuse rather than rewind.
		return structs.Conflict("scheduler %q is at index %d; a sync to index %d would go backwards (only a reset may)", r.Source, cur.Index, r.Index)
	}
	for i, a := range r.Allocs {
		if a == nil {
			return structs.Invalid(fmt.Sprintf("allocs[%d]", i), "is null")
		}
		if err := checkAllocOwner(snap, fmt.Sprintf("allocs[%d]", i), a, r.Source); err != nil {
			return err
		}
	}
	if len(r.Allocs) > 0 {
		if err := validateAllocUpsert(snap, &structs.AllocUpsertRequest{Allocs: r.Allocs, KeepNamespace: true}); err != nil {
			return err
		}
	}
	if len(r.Events) > 0 {
		if err := validateEvents(snap, &structs.EventAppendRequest{Events: r.Events}); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) schedulerSync(r *structs.SchedulerSyncRequest) (any, error) {
	if len(r.Allocs) > 0 {
		if _, err := w.upsertAllocs(&structs.AllocUpsertRequest{Allocs: r.Allocs}); err != nil {
			return nil, err
		}
	}
	if len(r.Events) > 0 {
		if _, err := w.appendEvents(&structs.EventAppendRequest{Events: r.Events}); err != nil {
			return nil, err
		}
	}
	old, err := w.snap.SchedulerCursor(nil, r.Source)
	if err != nil {
		return nil, err
	}
	c := &structs.SchedulerCursor{Source: r.Source, Index: r.Index, UpdateTime: r.Time.UTC(), CreateIndex: w.index, ModifyIndex: w.index}
	if old != nil {
		c.CreateIndex, c.Resets = old.CreateIndex, old.Resets
		if r.Reset && r.Index < old.Index {
			c.Resets++
		}
	}
	return nil, w.insert(TableSchedulers, c)
}
