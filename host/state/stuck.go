package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// The stuck table holds one row per stuck volume, pointing at the stored
// volume: what GET /v1/stats lists and what the volume list's ?stuck=true
// walks, without scanning every volume (BenchmarkScale: a scan at
// 1,000,000 volumes, on every load of the UI's overview and again on
// every write that woke its blocking query). An index on the volumes table
// would list them too, but memdb opens, commits and re-roots a transaction
// for every index of a table on every write to it (go-memdb
// Txn.writableIndex): 1.6% more bytes and 1.2% more objects per released
// claim in BenchmarkReleaseWrites, for a list that is almost always empty
// (BENCHMARKS.md "The stuck volumes: a derived table, not an index").
// A row is written only with a stuck volume: when it becomes stuck, is
// written while stuck, is unstuck or is deleted.
//
// Like the claims table, the rows are derived data: not persisted (the
// snapshot format and Digest are unchanged), built on Restore and on
// import, and kept in step with every volume write in the same
// transaction (writer.putVolume and deleteVolume, syncStuck).

// tableStuck holds the stuckRows (not in persistTables: derived). Its
// name starts with a letter no other table's does: memdb keeps each
// index's tree under "table.index" in one root tree and re-inserts the
// path of every index a write touches, so a name sharing "st" with the
// stats row (written by nearly every release entry) added a node to that
// path: 491 bytes and 4.7 objects per released claim in
// BenchmarkReleaseWrites (BENCHMARKS.md, the same section).
const tableStuck = "wedged"

type stuckRow struct{ Volume *structs.Volume }

func stuckTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tableStuck, Indexes: map[string]*memdb.IndexSchema{
		indexID: {Name: indexID, Unique: true, Indexer: stuckRowIndexer{volumeKey(func(v *structs.Volume) (string, string) { return v.Namespace, v.ID },
			"Namespace", "ID")}},
	}}
}

// stuckRowIndexer keys a row by its volume's (namespace, ID), as the
// volumes table's ID index keys the volume: the same arguments and order,
// so a list page's next_token means the same on both.
type stuckRowIndexer struct{ volumeKeyIndexer }

// FromObject implements memdb.SingleIndexer.
func (x stuckRowIndexer) FromObject(raw any) (bool, []byte, error) {
	r, ok := raw.(*stuckRow)
	if !ok {
		return false, nil, fmt.Errorf("stuck row index: want *stuckRow, got %T", raw)
	}
	return x.volumeKeyIndexer.FromObject(r.Volume)
}

// syncStuck brings the stuck table in step with a volume write: old is the
// stored volume (nil: none), v what replaces it (nil: deleted). A volume
// that is not stuck before or after costs two nil checks.
func (w *writer) syncStuck(old, v *structs.Volume) error {
	switch {
	case v != nil && v.Stuck != nil:
		// Replaces the row of old, if any: the same key.
		if err := w.txn.Insert(tableStuck, &stuckRow{Volume: v}); err != nil {
			return fmt.Errorf("insert stuck row of %s/%s: %w", v.Namespace, v.ID, err)
		}
	case old != nil && old.Stuck != nil:
		if err := w.txn.Delete(tableStuck, &stuckRow{Volume: old}); err != nil {
			return fmt.Errorf("delete stuck row of %s/%s: %w", old.Namespace, old.ID, err)
		}
	}
	return nil
}

// insertStuckRow adds the row of a volume inserted without a writer (a
// restore) when it is stuck.
func insertStuckRow(txn *memdb.Txn, v *structs.Volume) error {
	if v.Stuck == nil {
		return nil
	}
	if err := txn.Insert(tableStuck, &stuckRow{Volume: v}); err != nil {
		return fmt.Errorf("insert stuck row of %s/%s: %w", v.Namespace, v.ID, err)
	}
	return nil
}

// rebuildStuck replaces the stuck table's rows of txn with those of its
// volumes (an import, or a restore whose stream repeated a volume).
func rebuildStuck(txn *memdb.Txn) error { return rebuildFromVolumes(txn, tableStuck, insertStuckRow) }

// StuckVolumes lists the stuck volumes in (namespace, ID) order: O(stuck
// volumes), not O(volumes). ws, when not nil, is woken when a volume
// becomes stuck or unstuck, or a stuck one is written.
func (snap *Snapshot) StuckVolumes(ws memdb.WatchSet) ([]*structs.Volume, error) {
	it, err := snap.txn.Get(tableStuck, indexID)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", tableStuck, err)
	}
	watch(ws, it.WatchCh())
	var out []*structs.Volume
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*stuckRow).Volume)
	}
	return out, nil
}

// StuckVolumesFrom walks the stuck volumes in (namespace, ID) order from
// the first at or after (namespace, id), as VolumesFrom walks them all.
func (snap *Snapshot) StuckVolumesFrom(ws memdb.WatchSet, namespace, id string) (func() *structs.Volume, error) {
	// The stuck table has no index row of its own: any volume write wakes
	// ws, as with VolumesFrom.
	if err := snap.watchVolumeWrites(ws); err != nil {
		return nil, err
	}
	it, err := snap.txn.LowerBound(tableStuck, indexID, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("read stuck volumes from %s/%s: %w", namespace, id, err)
	}
	return func() *structs.Volume {
		if raw := it.Next(); raw != nil {
			return raw.(*stuckRow).Volume
		}
		return nil
	}, nil
}
