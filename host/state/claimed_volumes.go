package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// The volume list's ?claim_state=S filter walked every volume to find the
// few with a claim in S: after 10,000 releases at 100,000 volumes a page
// of ?claim_state=taken (none left) cost 14 ms, at 1,000,000 a scan of the
// whole table (hundreds of milliseconds, on every poll of the UI's list,
// one of the reads running when a loaded leader lost its quorum). Only a
// volume with a claim can match, so the list walks the claims table by
// volume instead: O(claims) at worst, and a page stops once it is full.
// The index is on the claims table, whose rows change only when a claim
// is taken or leaves its volume (claims.go), not on the volumes table,
// which every checkpoint rewrites.

// indexVolume keys the claims table by (namespace, volume ID, alloc): a
// volume's claims are adjacent and the volumes come in the volumes
// table's key order, so a list page's next_token means the same on both.
const indexVolume = "volume"

// claimVolumeIndexer is indexVolume's indexer. Each element is ended by a
// zero byte (IDs hold none: validate.go).
type claimVolumeIndexer struct{}

// FromObject implements memdb.SingleIndexer.
func (claimVolumeIndexer) FromObject(raw any) (bool, []byte, error) {
	r, ok := raw.(*claimRow)
	if !ok {
		return false, nil, fmt.Errorf("claim volume index: want *claimRow, got %T", raw)
	}
	key := make([]byte, 0, len(r.Volume.Namespace)+len(r.Volume.ID)+len(r.AllocID)+3)
	key = append(append(key, r.Volume.Namespace...), 0)
	key = append(append(key, r.Volume.ID...), 0)
	return true, append(append(key, r.AllocID...), 0), nil
}

// FromArgs implements memdb.Indexer: a volume's namespace and ID (its
// claims, as a prefix; or where a walk starts, with LowerBound).
func (claimVolumeIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 2 {
		return nil, fmt.Errorf("claim volume index: want namespace and volume ID, got %d arguments", len(args))
	}
	ns, ok1 := args[0].(string)
	id, ok2 := args[1].(string)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("claim volume index: want string arguments, got %T, %T", args[0], args[1])
	}
	key := append(append([]byte(ns), 0), id...)
	return append(key, 0), nil
}

// ClaimedVolumesFrom walks the volumes that have at least one claim in
// (namespace, ID) order from the first at or after (namespace, id), as
// VolumesFrom walks them all. ws, when not nil, is woken by any volume
// write.
func (snap *Snapshot) ClaimedVolumesFrom(ws memdb.WatchSet, namespace, id string) (func() *structs.Volume, error) {
	if err := snap.watchVolumeWrites(ws); err != nil {
		return nil, err
	}
	it, err := snap.txn.LowerBound(tableClaims, indexVolume, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("read claimed volumes from %s/%s: %w", namespace, id, err)
	}
	var last structs.VolumeRef
	return func() *structs.Volume {
		for raw := it.Next(); raw != nil; raw = it.Next() {
			r := raw.(*claimRow)
			if r.Volume == last {
				continue // another claim of the same volume
			}
			last = r.Volume
			// The row and the volume are written in one transaction: a
			// row always names a stored volume.
			if v, err := snap.VolumeByID(nil, r.Volume.Namespace, r.Volume.ID); err == nil && v != nil {
				return v
			}
		}
		return nil
	}, nil
}
