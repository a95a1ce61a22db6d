package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// The claims table holds one row per claim (allocation, volume) with the
// claim's node: what "volumes claimed by this allocation" and "volumes
// claimed on this node" read (an allocation turning terminal, a node
// going down). It replaces two multi-value indexes on the volumes table,
// which every volume write re-inserted, the volume's key in each path
// copied again although a claim checkpoint rarely changes which
// allocations hold claims: of a release's four volume writes (the
// allocation update that wakes the watcher, then the checkpoints) only the
// last, which frees the claim, changes the set. A row changes only when a
// claim is taken or leaves its volume, or (never in practice) moves node
// (BenchmarkReleaseWrites).
//
// Like volume_mods and the stats row, the rows are derived data: not
// persisted (the snapshot format and Digest are unchanged), built on
// Restore and on import, and kept in step with every volume write in the
// same transaction (writer.putVolume and deleteVolume, syncClaims).

// tableClaims holds the claimRows (not in persistTables: derived).
const tableClaims = "claims"

type claimRow struct {
	AllocID string
	NodeID  string
	Volume  structs.VolumeRef
}

func claimsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tableClaims, Indexes: map[string]*memdb.IndexSchema{
		indexID:   {Name: indexID, Unique: true, Indexer: claimRowIndexer{byNode: false}},
		indexNode: {Name: indexNode, Unique: true, Indexer: claimRowIndexer{byNode: true}},
		// The list's ?claim_state= walk (claimed_volumes.go).
		indexVolume: {Name: indexVolume, Unique: true, Indexer: claimVolumeIndexer{}},
	}}
}

// claimRowIndexer keys a claim row by alloc, namespace, volume ID (the
// primary key), or by node, namespace, volume ID, alloc: within one alloc
// or one node the rows come in volume key order, as the volumes table's
// indexes gave them, and a node's rows of one volume are adjacent. Each
// element is ended by a zero byte (IDs hold none: validate.go), so the one
// argument of a lookup, an alloc or node ID with its zero byte, selects
// exactly that alloc's or node's rows by prefix.
type claimRowIndexer struct{ byNode bool }

// FromObject implements memdb.SingleIndexer.
func (x claimRowIndexer) FromObject(raw any) (bool, []byte, error) {
	r, ok := raw.(*claimRow)
	if !ok {
		return false, nil, fmt.Errorf("claim row index: want *claimRow, got %T", raw)
	}
	first := r.AllocID
	if x.byNode {
		first = r.NodeID
	}
	key := make([]byte, 0, len(first)+len(r.Volume.Namespace)+len(r.Volume.ID)+len(r.AllocID)+4)
	key = append(append(key, first...), 0)
	key = append(append(key, r.Volume.Namespace...), 0)
	key = append(append(key, r.Volume.ID...), 0)
	if x.byNode {
		key = append(append(key, r.AllocID...), 0)
	}
	return true, key, nil
}

// FromArgs implements memdb.Indexer: one alloc (or node) ID, which memdb's
// Get and First match as a prefix.
func (x claimRowIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("claim row index: want one argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("claim row index: want a string argument, got %T", args[0])
	}
	return append([]byte(s), 0), nil
}

// syncClaims brings the claims table in step with a volume write: old is
// the stored volume (nil: none), v what replaces it (nil: deleted). Only
// claims that appear, leave or change node are written.
func (w *writer) syncClaims(old, v *structs.Volume) error {
	if old != nil {
		ref := structs.VolumeRef{Namespace: old.Namespace, ID: old.ID}
		for allocID, oc := range old.Claims {
			if v != nil {
				if nc, ok := v.Claims[allocID]; ok && nc.NodeID == oc.NodeID {
					continue
				}
			}
			if err := w.txn.Delete(tableClaims, &claimRow{AllocID: allocID, NodeID: oc.NodeID, Volume: ref}); err != nil {
				return fmt.Errorf("delete claim %s of %s/%s: %w", allocID, ref.Namespace, ref.ID, err)
			}
			w.noteNodeClaim(oc.NodeID, -1)
		}
	}
	if v != nil {
		ref := structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}
		for allocID, nc := range v.Claims {
			if old != nil {
				if oc, ok := old.Claims[allocID]; ok && oc.NodeID == nc.NodeID {
					continue
				}
			}
			if err := insertClaimRow(w.txn, ref, allocID, nc.NodeID); err != nil {
				return err
			}
			w.noteNodeClaim(nc.NodeID, +1)
		}
	}
	return nil
}

func insertClaimRow(txn *memdb.Txn, ref structs.VolumeRef, allocID, nodeID string) error {
	if err := txn.Insert(tableClaims, &claimRow{AllocID: allocID, NodeID: nodeID, Volume: ref}); err != nil {
		return fmt.Errorf("insert claim %s of %s/%s: %w", allocID, ref.Namespace, ref.ID, err)
	}
	return nil
}

// insertClaimRows adds the rows of a volume inserted without a writer (a
// restore), whose claims have no row yet.
func insertClaimRows(txn *memdb.Txn, v *structs.Volume) error {
	ref := structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}
	for allocID, c := range v.Claims {
		if err := insertClaimRow(txn, ref, allocID, c.NodeID); err != nil {
			return err
		}
	}
	return nil
}

// rebuildClaims replaces the claims table's rows of txn with those of its
// volumes (an import, or a restore whose stream repeated a volume).
func rebuildClaims(txn *memdb.Txn) error {
	return rebuildFromVolumes(txn, tableClaims, insertClaimRows)
}

// rebuildFromVolumes replaces every row of a table derived from the
// volumes with what add inserts for each volume of txn.
func rebuildFromVolumes(txn *memdb.Txn, table string, add func(*memdb.Txn, *structs.Volume) error) error {
	if _, err := txn.DeleteAll(table, indexID); err != nil {
		return fmt.Errorf("delete %s rows: %w", table, err)
	}
	it, err := txn.Get(TableVolumes, indexID)
	if err != nil {
		return fmt.Errorf("read volumes: %w", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if err := add(txn, raw.(*structs.Volume)); err != nil {
			return err
		}
	}
	return nil
}

// volumesWithClaimBy lists the volumes with a claim by the alloc (or, with
// byNode, with a claim on the node), in key order, each once. ws is woken
// when a claim of that alloc (node) appears or leaves, not by writes to
// the volumes that change no claim.
func (snap *Snapshot) volumesWithClaimBy(ws memdb.WatchSet, byNode bool, id string) ([]*structs.Volume, error) {
	index := indexID
	if byNode {
		index = indexNode
	}
	it, err := snap.txn.Get(tableClaims, index, id)
	if err != nil {
		return nil, fmt.Errorf("read claims by %s: %w", index, err)
	}
	watch(ws, it.WatchCh())
	var out []*structs.Volume
	var last structs.VolumeRef
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(*claimRow)
		if len(out) > 0 && r.Volume == last {
			continue // another claim of the same volume on the node
		}
		last = r.Volume
		v, err := snap.VolumeByID(ws, r.Volume.Namespace, r.Volume.ID)
		if err != nil {
			return nil, err
		}
		if v == nil {
			return nil, fmt.Errorf("claims: %s of %s/%s names a volume that is not stored", r.AllocID, r.Volume.Namespace, r.Volume.ID)
		}
		out = append(out, v)
	}
	return out, nil
}
