package state

import (
	"errors"
	"fmt"
	"maps"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// VolumeStats are the volume counts the metrics collector reports, kept in
// step with every write so a scrape reads one row instead of scanning every
// volume (BenchmarkScale times both at 1,000,000 volumes). They live in the tableStats table of the same memdb
// transaction as the volumes, so a Snapshot's stats always describe exactly
// that snapshot's volumes. They are derived data: not persisted (the raft
// snapshot format and Digest are unchanged), recounted on Restore.
type VolumeStats struct {
	Volumes int `json:"volumes"`
	// Claims counts claims by release state (structs.ClaimState).
	Claims map[structs.ClaimState]int `json:"claims"`
	// Failing counts claims carrying a last error.
	Failing int `json:"failing"`
	// Stuck counts volumes marked stuck.
	Stuck int `json:"stuck"`
	// ByPlugin counts volumes by the CSI plugin they name (`module status`
	// reads what a plugin-selecting module serves from it).
	ByPlugin map[string]int `json:"by_plugin"`
	// ByNamespace counts volumes by namespace (GET /v1/stats).
	ByNamespace map[string]int `json:"by_namespace"`
}

// tableStats holds the one statsRow (not in persistTables: derived).
const tableStats = "stats"

// statsKey is the key of the volume statistics row.
const statsKey = "volumes"

type statsRow struct {
	Key   string
	Stats VolumeStats
}

func statsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tableStats, Indexes: map[string]*memdb.IndexSchema{
		indexID: {Name: indexID, Unique: true, Indexer: stringKey("Key", func(r *statsRow) string { return r.Key })},
	}}
}

// volumeDelta is what one volume contributes to VolumeStats, signed.
type volumeDelta struct {
	volumes, failing, stuck int
	claims                  map[structs.ClaimState]int
	// plugins and namespaces: volumes by plugin ID and by namespace,
	// moved only by adds, deletes and a changed plugin (a stored volume's
	// namespace is part of its key), so a claim write allocates nothing
	// for them.
	plugins, namespaces map[string]int
}

// count adds a stored volume, its plugin and namespace included (a
// recount, a restore).
func (d *volumeDelta) count(v *structs.Volume) {
	d.add(v, +1)
	d.plugin(v.PluginID, +1)
	d.namespace(v.Namespace, +1)
}

// plugin adds sign volumes of plugin id.
func (d *volumeDelta) plugin(id string, sign int) { bump(&d.plugins, id, sign) }

// namespace adds sign volumes of namespace ns.
func (d *volumeDelta) namespace(ns string, sign int) { bump(&d.namespaces, ns, sign) }

func bump(m *map[string]int, key string, sign int) {
	if *m == nil {
		*m = make(map[string]int, 1)
	}
	(*m)[key] += sign
}

// add adds sign times v's contribution.
func (d *volumeDelta) add(v *structs.Volume, sign int) {
	if v == nil {
		return
	}
	d.volumes += sign
	if v.Stuck != nil {
		d.stuck += sign
	}
	for _, cl := range v.Claims {
		if d.claims == nil {
			d.claims = make(map[structs.ClaimState]int, 4)
		}
		d.claims[cl.State] += sign
		if cl.LastError != nil {
			d.failing += sign
		}
	}
}

func (d *volumeDelta) zero() bool {
	if d.volumes != 0 || d.failing != 0 || d.stuck != 0 {
		return false
	}
	for _, n := range d.claims {
		if n != 0 {
			return false
		}
	}
	for _, counts := range []map[string]int{d.plugins, d.namespaces} {
		for _, n := range counts {
			if n != 0 {
				return false
			}
		}
	}
	return true
}

// applyTo returns s with d added (a new value: rows are immutable).
func (d *volumeDelta) applyTo(s VolumeStats) VolumeStats {
	n := VolumeStats{Volumes: s.Volumes + d.volumes, Failing: s.Failing + d.failing, Stuck: s.Stuck + d.stuck,
		Claims: make(map[structs.ClaimState]int, len(s.Claims)+len(d.claims))}
	for k, v := range s.Claims {
		n.Claims[k] = v
	}
	for k, v := range d.claims {
		if n.Claims[k] += v; n.Claims[k] == 0 {
			delete(n.Claims, k)
		}
	}
	n.ByPlugin = applyCounts(s.ByPlugin, d.plugins)
	n.ByNamespace = applyCounts(s.ByNamespace, d.namespaces)
	return n
}

// applyCounts returns counts with delta added, dropping the keys that
// reach zero: counts itself when delta is empty (rows are immutable, so
// an unchanged map is shared), a new map otherwise.
func applyCounts(counts, delta map[string]int) map[string]int {
	if len(delta) == 0 {
		return counts
	}
	n := make(map[string]int, len(counts)+len(delta))
	for k, v := range counts {
		n[k] = v
	}
	for k, v := range delta {
		if n[k] += v; n[k] == 0 {
			delete(n, k)
		}
	}
	return n
}

// putVolume writes v over old, the stored volume with its key (nil when
// new), keeping VolumeStats in step. Every volume write goes through it or
// deleteVolume (writer.insert refuses the volumes table).
func (w *writer) putVolume(old, v *structs.Volume) error {
	w.stats.add(old, -1)
	w.stats.add(v, +1)
	if old == nil || old.PluginID != v.PluginID {
		if old != nil {
			w.stats.plugin(old.PluginID, -1)
		}
		w.stats.plugin(v.PluginID, +1)
	}
	if old == nil {
		w.stats.namespace(v.Namespace, +1)
	}
	w.noteVolumeWrite(structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}, old, v)
	if err := errors.Join(w.syncClaims(old, v), w.syncStuck(old, v)); err != nil {
		return err
	}
	return w.insertRow(TableVolumes, v)
}

// deleteVolume removes the stored volume v.
func (w *writer) deleteVolume(v *structs.Volume) error {
	w.stats.add(v, -1)
	w.stats.plugin(v.PluginID, -1)
	w.stats.namespace(v.Namespace, -1)
	w.noteVolumeWrite(structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}, v, nil)
	if err := errors.Join(w.syncClaims(v, nil), w.syncStuck(v, nil)); err != nil {
		return err
	}
	return w.deleteRow(TableVolumes, v)
}

// finishStats writes the volume statistics when this write changed them.
func (w *writer) finishStats() error {
	if w.stats.zero() {
		return nil
	}
	cur, err := readStats(w.txn)
	if err != nil {
		return err
	}
	return insertStats(w.txn, w.stats.applyTo(cur))
}

func readStats(txn *memdb.Txn) (VolumeStats, error) {
	raw, err := txn.First(tableStats, indexID, statsKey)
	if err != nil {
		return VolumeStats{}, fmt.Errorf("read volume stats: %w", err)
	}
	if row, ok := raw.(*statsRow); ok {
		return row.Stats, nil
	}
	return VolumeStats{}, nil
}

func insertStats(txn *memdb.Txn, s VolumeStats) error {
	if err := txn.Insert(tableStats, &statsRow{Key: statsKey, Stats: s}); err != nil {
		return fmt.Errorf("write volume stats: %w", err)
	}
	return nil
}

// recountStats counts the volumes of txn from scratch (Restore, bulk load).
func recountStats(txn *memdb.Txn) error {
	var d volumeDelta
	it, err := txn.Get(TableVolumes, indexID)
	if err != nil {
		return fmt.Errorf("count volumes: %w", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		d.count(raw.(*structs.Volume))
	}
	return insertStats(txn, d.applyTo(VolumeStats{}))
}

// VolumeStats returns the snapshot's volume counts in O(1). Its maps are
// the caller's own.
func (snap *Snapshot) VolumeStats() (VolumeStats, error) { return snap.VolumeStatsWatch(nil) }

// VolumeStatsWatch is VolumeStats for a blocking query: ws, when not nil,
// is woken by any write that changes a count.
func (snap *Snapshot) VolumeStatsWatch(ws memdb.WatchSet) (VolumeStats, error) {
	row, err := first[*statsRow](snap, ws, tableStats, indexID, statsKey)
	if err != nil {
		return VolumeStats{}, err
	}
	var s VolumeStats
	if row != nil {
		s = row.Stats
	}
	s.Claims = cloneCounts(s.Claims)
	s.ByPlugin = cloneCounts(s.ByPlugin)
	s.ByNamespace = cloneCounts(s.ByNamespace)
	return s, nil
}

// cloneCounts copies a row's map for a caller, never nil.
func cloneCounts[K comparable](m map[K]int) map[K]int {
	if m == nil {
		return map[K]int{}
	}
	return maps.Clone(m)
}
