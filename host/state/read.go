package state

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// Reads on a Snapshot. ws may be nil; when set, the channels the result
// depends on are added to it for BlockingQuery. A missing object is (nil, nil).

func watch(ws memdb.WatchSet, ch <-chan struct{}) {
	if ws != nil && ch != nil {
		ws.Add(ch)
	}
}

// get runs a memdb Get and collects the rows as T.
func get[T any](snap *Snapshot, ws memdb.WatchSet, table, index string, args ...any) ([]T, error) {
	it, err := snap.txn.Get(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s by %s: %w", table, index, err)
	}
	watch(ws, it.WatchCh())
	var out []T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(T))
	}
	return out, nil
}

// first runs a memdb FirstWatch and returns the row as T (zero when missing).
func first[T any](snap *Snapshot, ws memdb.WatchSet, table, index string, args ...any) (T, error) {
	var zero T
	ch, raw, err := snap.txn.FirstWatch(table, index, args...)
	if err != nil {
		return zero, fmt.Errorf("read %s by %s: %w", table, index, err)
	}
	watch(ws, ch)
	if raw == nil {
		return zero, nil
	}
	return raw.(T), nil
}

// Volumes lists every volume, ordered by namespace and ID.
func (snap *Snapshot) Volumes(ws memdb.WatchSet) ([]*structs.Volume, error) {
	return get[*structs.Volume](snap, ws, TableVolumes, indexID)
}

// VolumeByID returns one volume.
func (snap *Snapshot) VolumeByID(ws memdb.WatchSet, namespace, id string) (*structs.Volume, error) {
	if snap.own != nil && ws == nil {
		return snap.own.volume(namespace, id)
	}
	return first[*structs.Volume](snap, ws, TableVolumes, indexID, namespace, id)
}

// VolumesByPlugin lists the volumes of a CSI plugin, ordered by namespace
// and ID. It reads the plugin prefix of the external index: the plugin ID
// in full (its terminator included, so "ebs" does not match "ebs2") and an
// empty external ID prefix.
func (snap *Snapshot) VolumesByPlugin(ws memdb.WatchSet, pluginID string) ([]*structs.Volume, error) {
	vols, err := get[*structs.Volume](snap, ws, TableVolumes, indexExternal+"_prefix", pluginID, "")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(vols, func(a, b *structs.Volume) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.ID, b.ID))
	})
	return vols, nil
}

// watchVolumeWrites adds to ws, when not nil, the volumes table's index
// row, which every write to the table changes. A walk from a LowerBound
// iterator needs it: the iterator's channel does not cover every key the
// walk may reach, so ws is woken by any volume write, as a whole-table
// read would be.
func (snap *Snapshot) watchVolumeWrites(ws memdb.WatchSet) error {
	if ws == nil {
		return nil
	}
	ch, _, err := snap.txn.FirstWatch(TableIndex, indexID, TableVolumes)
	if err != nil {
		return fmt.Errorf("read index of %s: %w", TableVolumes, err)
	}
	ws.Add(ch)
	return nil
}

// VolumesFrom walks the volumes in primary key order from the first whose
// (namespace, ID) is at or after (namespace, id), through the ID index with
// LowerBound: a caller that stops after a page pays for the page, not the
// table. next returns nil after the last volume; ws wakes on any volume
// write.
func (snap *Snapshot) VolumesFrom(ws memdb.WatchSet, namespace, id string) (func() *structs.Volume, error) {
	if err := snap.watchVolumeWrites(ws); err != nil {
		return nil, err
	}
	it, err := snap.txn.LowerBound(TableVolumes, indexID, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("read volumes from %s/%s: %w", namespace, id, err)
	}
	return volumeWalk(it), nil
}

// VolumesByExternalID lists the volumes registered on plugin pluginID for
// the storage object externalID (normally at most one).
func (snap *Snapshot) VolumesByExternalID(ws memdb.WatchSet, pluginID, externalID string) ([]*structs.Volume, error) {
	return get[*structs.Volume](snap, ws, TableVolumes, indexExternal, pluginID, externalID)
}

// VolumesModifiedSince lists the volumes whose ModifyIndex > index, in
// ModifyIndex order (key order within one index). It reads the volume_mods
// rows above index (volume_mods.go), so its cost is proportional to the
// answer, not to the table; ws is woken by any write to the volumes table.
func (snap *Snapshot) VolumesModifiedSince(ws memdb.WatchSet, index uint64) ([]*structs.Volume, error) {
	if ws != nil {
		ch, _, err := snap.txn.FirstWatch(TableIndex, indexID, TableVolumes)
		if err != nil {
			return nil, fmt.Errorf("read index of %s: %w", TableVolumes, err)
		}
		ws.Add(ch)
	}
	return volumesModifiedSince(snap.txn, index)
}

// VolumesClaimedOnNode lists the volumes with at least one claim on the node.
func (snap *Snapshot) VolumesClaimedOnNode(ws memdb.WatchSet, nodeID string) ([]*structs.Volume, error) {
	return snap.volumesWithClaimBy(ws, true, nodeID)
}

// VolumesClaimedByAlloc lists the volumes the allocation holds a claim on.
func (snap *Snapshot) VolumesClaimedByAlloc(ws memdb.WatchSet, allocID string) ([]*structs.Volume, error) {
	return snap.volumesWithClaimBy(ws, false, allocID)
}

// ReleasableVolumes lists the volumes with at least one claim whose
// allocation is terminal or gone: what leader step-up and the claim GC visit.
// Only the claims are read (the claims table, claims.go), not the volumes;
// rows come grouped by alloc, so each alloc is looked up once. ws is woken
// when a claim appears or leaves and by any allocation write.
func (snap *Snapshot) ReleasableVolumes(ws memdb.WatchSet) ([]structs.VolumeRef, error) {
	it, err := snap.txn.Get(tableClaims, indexID)
	if err != nil {
		return nil, fmt.Errorf("read claims: %w", err)
	}
	watch(ws, it.WatchCh())
	if ws != nil {
		ch, _, err := snap.txn.FirstWatch(TableIndex, indexID, TableAllocs)
		if err != nil {
			return nil, fmt.Errorf("read index of %s: %w", TableAllocs, err)
		}
		ws.Add(ch)
	}
	seen := make(map[structs.VolumeRef]bool)
	var out []structs.VolumeRef
	var allocID string
	var ended bool
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(*claimRow)
		if r.AllocID != allocID || allocID == "" {
			a, err := snap.AllocByID(nil, r.AllocID)
			if err != nil {
				return nil, err
			}
			allocID, ended = r.AllocID, a == nil || a.ClientStatus.Terminal()
		}
		if ended && !seen[r.Volume] {
			seen[r.Volume] = true
			out = append(out, r.Volume)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Allocs lists every allocation, ordered by ID.
func (snap *Snapshot) Allocs(ws memdb.WatchSet) ([]*structs.Alloc, error) {
	return get[*structs.Alloc](snap, ws, TableAllocs, indexID)
}

// AllocByID returns one allocation.
func (snap *Snapshot) AllocByID(ws memdb.WatchSet, id string) (*structs.Alloc, error) {
	if snap.own != nil && ws == nil {
		return snap.own.alloc(id)
	}
	return first[*structs.Alloc](snap, ws, TableAllocs, indexID, id)
}

// AllocsByNode lists the allocations placed on a node.
func (snap *Snapshot) AllocsByNode(ws memdb.WatchSet, nodeID string) ([]*structs.Alloc, error) {
	return get[*structs.Alloc](snap, ws, TableAllocs, indexNode, nodeID)
}

// Nodes lists every node, ordered by ID.
func (snap *Snapshot) Nodes(ws memdb.WatchSet) ([]*structs.Node, error) {
	return get[*structs.Node](snap, ws, TableNodes, indexID)
}

// NodesByMachine lists the nodes that report machine m: the plugin's
// external node ID (a node upsert refuses a second one).
func (snap *Snapshot) NodesByMachine(ws memdb.WatchSet, m structs.Machine) ([]*structs.Node, error) {
	return get[*structs.Node](snap, ws, TableNodes, indexMachine, m)
}

// NodeByID returns one node.
func (snap *Snapshot) NodeByID(ws memdb.WatchSet, id string) (*structs.Node, error) {
	return first[*structs.Node](snap, ws, TableNodes, indexID, id)
}

// Plugins lists every CSI plugin, ordered by ID.
func (snap *Snapshot) Plugins(ws memdb.WatchSet) ([]*structs.Plugin, error) {
	return get[*structs.Plugin](snap, ws, TablePlugins, indexID)
}

// PluginByID returns one CSI plugin.
func (snap *Snapshot) PluginByID(ws memdb.WatchSet, id string) (*structs.Plugin, error) {
	if snap.plugins == nil || ws != nil {
		return first[*structs.Plugin](snap, ws, TablePlugins, indexID, id)
	}
	if p, ok := snap.plugins[id]; ok {
		return p, nil
	}
	p, err := first[*structs.Plugin](snap, ws, TablePlugins, indexID, id)
	if err == nil {
		snap.plugins[id] = p
	}
	return p, err
}

// Leftovers lists the attachments force-deregistration may have left behind.
func (snap *Snapshot) Leftovers(ws memdb.WatchSet) ([]*structs.Leftover, error) {
	return get[*structs.Leftover](snap, ws, TableLeftovers, indexID)
}

// Events lists the retained events with Index > sinceIndex, oldest first.
func (snap *Snapshot) Events(ws memdb.WatchSet, sinceIndex uint64) ([]*structs.Event, error) {
	if ws != nil {
		ch, _, err := snap.txn.FirstWatch(TableIndex, indexID, TableEvents)
		if err != nil {
			return nil, fmt.Errorf("read index of %s: %w", TableEvents, err)
		}
		ws.Add(ch)
	}
	// A scan of the retained events (bounded by the rings): the events
	// table has no raft index index, which every event write would pay
	// for (schema.go).
	it, err := snap.txn.Get(TableEvents, indexID)
	if err != nil {
		return nil, fmt.Errorf("read events since %d: %w", sinceIndex, err)
	}
	var out []*structs.Event
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if r := raw.(*eventRow); r.Index > sinceIndex {
			out = append(out, r.Event)
		}
	}
	return out, nil
}

// Index returns the raft index of the last write to table (0: never written).
func (snap *Snapshot) Index(table string) (uint64, error) {
	raw, err := snap.txn.First(TableIndex, indexID, table)
	if err != nil {
		return 0, fmt.Errorf("read index of %s: %w", table, err)
	}
	if raw == nil {
		return 0, nil
	}
	return raw.(*indexRow).Value, nil
}

// IndexWatch is Index, adding the table index's watch channel to ws.
func (snap *Snapshot) IndexWatch(ws memdb.WatchSet, table string) (uint64, error) {
	ch, raw, err := snap.txn.FirstWatch(TableIndex, indexID, table)
	if err != nil {
		return 0, fmt.Errorf("read index of %s: %w", table, err)
	}
	watch(ws, ch)
	if raw == nil {
		return 0, nil
	}
	return raw.(*indexRow).Value, nil
}

// LatestIndex is the highest raft index applied to any table.
func (snap *Snapshot) LatestIndex() uint64 {
	it, err := snap.txn.Get(TableIndex, indexID)
	if err != nil {
		return 0
	}
	var max uint64
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if v := raw.(*indexRow).Value; v > max {
			max = v
		}
	}
	return max
}

// VolumesPage returns up to limit volumes of namespace (every namespace
// when "") in primary key order, starting at the first volume whose
// (namespace, ID) is at or after (fromNamespace, fromID), and the key of
// the volume after the page ("", "" on the last page). It walks the ID
// index from that key with LowerBound, so a page costs its own size, not
// the table's (BenchmarkScale reads a list page at 1,000,000 volumes).
func (snap *Snapshot) VolumesPage(ws memdb.WatchSet, namespace, fromNamespace, fromID string, limit int) (page []*structs.Volume, nextNamespace, nextID string, err error) {
	if namespace != "" && fromNamespace < namespace {
		fromNamespace, fromID = namespace, ""
	}
	it, err := snap.txn.LowerBound(TableVolumes, indexID, fromNamespace, fromID)
	if err != nil {
		return nil, "", "", fmt.Errorf("read a page of volumes: %w", err)
	}
	watch(ws, it.WatchCh())
	page = make([]*structs.Volume, 0, min(limit, 1024))
	for raw := it.Next(); raw != nil; raw = it.Next() {
		v := raw.(*structs.Volume)
		if namespace != "" && v.Namespace != namespace {
			break
		}
		if len(page) == limit {
			return page, v.Namespace, v.ID, nil
		}
		page = append(page, v)
	}
	return page, "", "", nil
}
