package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// VolumePluginIDs lists the distinct plugin IDs the volumes name, registered
// or not, in order. It hops through the (plugin, external ID) index with
// LowerBound, one seek per distinct ID, so it costs the number of plugins,
// not of volumes (`module status` at 1,000,000 volumes).
func (snap *Snapshot) VolumePluginIDs() ([]string, error) {
	var ids []string
	from := ""
	for {
		it, err := snap.txn.LowerBound(TableVolumes, indexExternal, from, "")
		if err != nil {
			return nil, fmt.Errorf("read the plugin IDs of volumes: %w", err)
		}
		raw := it.Next()
		if raw == nil {
			return ids, nil
		}
		id := raw.(*structs.Volume).PluginID
		if len(ids) > 0 && id <= ids[len(ids)-1] {
			// Only an ID holding a control character (refused at
			// registration) could sort this way: never loop on it.
			return nil, fmt.Errorf("read the plugin IDs of volumes: plugin ID %q does not sort after %q", id, ids[len(ids)-1])
		}
		ids = append(ids, id)
		// Index keys start with the ID and a NUL; "\x01" sorts after every
		// key of this ID and before the next ID (IDs are printable:
		// validate.go).
		from = id + "\x01"
	}
}

// VolumesOfPlugin walks the volumes of one plugin lazily, in external ID
// order (then namespace and ID): a caller that stops early pays for what
// it read.
func (snap *Snapshot) VolumesOfPlugin(pluginID string) (func() *structs.Volume, error) {
	it, err := snap.txn.Get(TableVolumes, indexExternal+"_prefix", pluginID, "")
	if err != nil {
		return nil, fmt.Errorf("read volumes of plugin %q: %w", pluginID, err)
	}
	return volumeWalk(it), nil
}

// volumeWalk turns a memdb iterator over volumes into a next function that
// returns nil after the last one.
func volumeWalk(it memdb.ResultIterator) func() *structs.Volume {
	return func() *structs.Volume {
		raw := it.Next()
		if raw == nil {
			return nil
		}
		return raw.(*structs.Volume)
	}
}
