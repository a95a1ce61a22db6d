package state

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// "Volumes modified since N" (blocking queries on the volumes, the
// watcher's feed: wake only the volumes whose index moved) is answered from
// the volume_mods table: one row per raft index that last modified some
// volume, listing those volumes. It replaces a memdb index on the volumes'
// ModifyIndex, which cost every volume a radix leaf and node of its own
// (with their two watch channels, about 380 B) although volumes are written
// many at a time: at 1,000,000 volumes that index was a large part of the
// store's memory and of a restore's inserts (BenchmarkScale). The rows are
// derived data, like VolumeStats: not persisted (the snapshot format and
// Digest are unchanged), rebuilt on Restore and on import, and kept in step
// with every volume write in the same transaction (writer.finishVolumeMods).
//
// A row lists its volumes in key order and may still list volumes modified
// again since (stale refs): a volume is live in row N exactly when it
// exists with ModifyIndex N, and every live volume is in its row. A row's
// live count says when it can go (none left) and when it is compacted
// (fewer than half its refs live), so the stale refs never outnumber the
// live ones and a read stays proportional to its answer.

// tableVolumeMods holds the volumeModsRows (not in persistTables: derived).
const tableVolumeMods = "volume_mods"

type volumeModsRow struct {
	Index uint64
	// Refs are the volumes written at Index, in key order, some perhaps
	// stale (modified or deleted since).
	Refs []structs.VolumeRef
	// Live counts the refs whose volume still has ModifyIndex == Index.
	Live int
}

func volumeModsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tableVolumeMods, Indexes: map[string]*memdb.IndexSchema{
		indexID: {Name: indexID, Unique: true, Indexer: hexUint(func(r *volumeModsRow) uint64 { return r.Index })},
	}}
}

func compareRefs(a, b structs.VolumeRef) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
}

// volumeMod is a volume's ModifyIndex before and after a transaction's
// writes of it, 0 when it did not exist or no longer does.
type volumeMod struct{ before, after uint64 }

// noteVolumeWrite records a write of the volume ref: old is the stored
// volume, nil when there is none, and v what the write stores, nil for a
// delete. The first write of ref in the transaction sets its before, every
// write its after: finishVolumeMods then needs no read of the volumes
// (every write of the volumes table goes through putVolume or
// deleteVolume, which call this).
func (w *writer) noteVolumeWrite(ref structs.VolumeRef, old, v *structs.Volume) {
	var after uint64
	if v != nil {
		after = v.ModifyIndex
	}
	if m, seen := w.mods[ref]; seen {
		m.after = after
		w.mods[ref] = m
		return
	}
	if w.mods == nil {
		w.mods = map[structs.VolumeRef]volumeMod{}
	}
	var before uint64
	if old != nil {
		before = old.ModifyIndex
	}
	w.mods[ref] = volumeMod{before: before, after: after}
}

// finishVolumeMods moves each volume this transaction wrote from the row
// of the index it had before to the row of the one it has now.
func (w *writer) finishVolumeMods() error {
	if len(w.mods) == 0 {
		return nil
	}
	added := map[uint64][]structs.VolumeRef{}
	removed := map[uint64]int{}
	for ref, m := range w.mods {
		before, after := m.before, m.after
		if before == after {
			continue
		}
		if before != 0 {
			removed[before]++
		}
		if after != 0 {
			added[after] = append(added[after], ref)
		}
	}
	// Every row this moves is read before the first is written, and each
	// write is then carried in rows: the same as reading each through the
	// transaction after the writes before it, without a read of the
	// modified table between two writes, which drops its writable-node
	// cache (own_rows.go).
	rows := make(map[uint64]*volumeModsRow, len(added)+len(removed))
	for idx := range added {
		if _, err := readVolumeModsInto(w.txn, rows, idx); err != nil {
			return err
		}
	}
	for idx := range removed {
		if _, err := readVolumeModsInto(w.txn, rows, idx); err != nil {
			return err
		}
	}
	// Additions first: a compaction below then sees every row complete.
	for _, idx := range slices.Sorted(maps.Keys(added)) {
		refs := added[idx]
		slices.SortFunc(refs, compareRefs)
		row := &volumeModsRow{Index: idx, Refs: refs, Live: len(refs)}
		if old := rows[idx]; old != nil {
			// Rare: writes at an index already written (an import). The
			// refs were not live here; some may be listed as stale.
			row.Refs, row.Live = mergeRefs(old.Refs, refs), old.Live+len(refs)
		}
		if err := insertVolumeMods(w.txn, row); err != nil {
			return err
		}
		rows[idx] = row
	}
	for _, idx := range slices.Sorted(maps.Keys(removed)) {
		old := rows[idx]
		if old == nil {
			return fmt.Errorf("volume modifications: no row for index %d, which a volume had", idx)
		}
		row := &volumeModsRow{Index: idx, Refs: old.Refs, Live: old.Live - removed[idx]}
		switch {
		case row.Live <= 0:
			if err := w.txn.Delete(tableVolumeMods, old); err != nil {
				return fmt.Errorf("volume modifications: delete row %d: %w", idx, err)
			}
			rows[idx] = nil
			continue
		case 2*row.Live < len(row.Refs):
			var err error
			if row.Refs, err = liveRefs(w.txn, idx, row.Refs); err != nil {
				return err
			}
			row.Live = len(row.Refs)
		}
		if err := insertVolumeMods(w.txn, row); err != nil {
			return err
		}
		rows[idx] = row
	}
	return nil
}

// readVolumeModsInto reads row idx into rows once.
func readVolumeModsInto(txn *memdb.Txn, rows map[uint64]*volumeModsRow, idx uint64) (*volumeModsRow, error) {
	if row, ok := rows[idx]; ok {
		return row, nil
	}
	row, err := volumeModsAt(txn, idx)
	if err != nil {
		return nil, err
	}
	rows[idx] = row
	return row, nil
}

// mergeRefs is the sorted union of two sorted ref lists, in a new slice.
func mergeRefs(a, b []structs.VolumeRef) []structs.VolumeRef {
	out := make([]structs.VolumeRef, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := compareRefs(a[i], b[j]); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	return append(append(out, a[i:]...), b[j:]...)
}

// liveRefs is refs without the stale ones: those whose volume is gone or
// has an index other than idx.
func liveRefs(txn *memdb.Txn, idx uint64, refs []structs.VolumeRef) ([]structs.VolumeRef, error) {
	var out []structs.VolumeRef
	for _, ref := range refs {
		mi, err := modifyIndexOf(txn, ref)
		if err != nil {
			return nil, err
		}
		if mi == idx {
			out = append(out, ref)
		}
	}
	return out, nil
}

// modifyIndexOf is the ModifyIndex of the stored volume ref, 0 when there
// is none.
func modifyIndexOf(txn *memdb.Txn, ref structs.VolumeRef) (uint64, error) {
	raw, err := txn.First(TableVolumes, indexID, ref.Namespace, ref.ID)
	if err != nil {
		return 0, fmt.Errorf("read volume %s/%s: %w", ref.Namespace, ref.ID, err)
	}
	if raw == nil {
		return 0, nil
	}
	return raw.(*structs.Volume).ModifyIndex, nil
}

func volumeModsAt(txn *memdb.Txn, idx uint64) (*volumeModsRow, error) {
	raw, err := txn.First(tableVolumeMods, indexID, idx)
	if err != nil {
		return nil, fmt.Errorf("volume modifications: read row %d: %w", idx, err)
	}
	row, _ := raw.(*volumeModsRow)
	return row, nil
}

func insertVolumeMods(txn *memdb.Txn, row *volumeModsRow) error {
	if err := txn.Insert(tableVolumeMods, row); err != nil {
		return fmt.Errorf("volume modifications: write row %d: %w", row.Index, err)
	}
	return nil
}

// volumeModsBuilder groups volumes by ModifyIndex as a restore inserts them
// (in key order, so each group comes out sorted).
type volumeModsBuilder map[uint64][]structs.VolumeRef

func (b volumeModsBuilder) add(v *structs.Volume) {
	if v.ModifyIndex != 0 { // never "modified since" any index: not listed
		b[v.ModifyIndex] = append(b[v.ModifyIndex], structs.VolumeRef{Namespace: v.Namespace, ID: v.ID})
	}
}

// insertInto writes one row per group into txn, which holds no row yet.
func (b volumeModsBuilder) insertInto(txn *memdb.Txn) error {
	for _, idx := range slices.Sorted(maps.Keys(b)) {
		refs := b[idx]
		if cap(refs) > len(refs)+len(refs)/4 {
			refs = slices.Clone(refs) // the groups stay for the store's life
		}
		if err := insertVolumeMods(txn, &volumeModsRow{Index: idx, Refs: refs, Live: len(refs)}); err != nil {
			return err
		}
	}
	return nil
}

// rebuildVolumeMods builds the volume_mods rows of txn from its volumes
// (an import, or a restore whose stream repeated a volume). txn holds no
// row yet.
func rebuildVolumeMods(txn *memdb.Txn) error {
	b := volumeModsBuilder{}
	it, err := txn.Get(TableVolumes, indexID)
	if err != nil {
		return fmt.Errorf("read volumes: %w", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		b.add(raw.(*structs.Volume))
	}
	return b.insertInto(txn)
}

// volumesModifiedSince lists the volumes whose ModifyIndex > index, in
// ModifyIndex order and key order within one index.
func volumesModifiedSince(txn *memdb.Txn, index uint64) ([]*structs.Volume, error) {
	var out []*structs.Volume
	if index == 0 {
		// Every volume (a watcher starting, a restore): one walk of the
		// table beats a lookup per volume.
		it, err := txn.Get(TableVolumes, indexID)
		if err != nil {
			return nil, fmt.Errorf("read volumes: %w", err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if v := raw.(*structs.Volume); v.ModifyIndex != 0 {
				out = append(out, v)
			}
		}
		slices.SortStableFunc(out, func(a, b *structs.Volume) int { return cmp.Compare(a.ModifyIndex, b.ModifyIndex) })
		return out, nil
	}
	it, err := txn.LowerBound(tableVolumeMods, indexID, index+1)
	if err != nil {
		return nil, fmt.Errorf("read volume modifications since %d: %w", index, err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		row := raw.(*volumeModsRow)
		for _, ref := range row.Refs {
			v, err := txn.First(TableVolumes, indexID, ref.Namespace, ref.ID)
			if err != nil {
				return nil, fmt.Errorf("read volume %s/%s: %w", ref.Namespace, ref.ID, err)
			}
			if v, ok := v.(*structs.Volume); ok && v.ModifyIndex == row.Index {
				out = append(out, v)
			}
		}
	}
	return out, nil
}
