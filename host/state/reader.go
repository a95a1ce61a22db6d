package state

import "github.com/volhost/volhost/host/structs"

// Reader reads current objects, each call from a fresh snapshot. It
// implements the watcher's StateReader; a missing object is (nil, nil).
type Reader struct{ s *Store }

// Reader returns a StateReader over the store.
func (s *Store) Reader() Reader { return Reader{s: s} }

// Volume returns one volume.
func (r Reader) Volume(namespace, id string) (*structs.Volume, error) {
	return r.s.Snapshot().VolumeByID(nil, namespace, id)
}

// Alloc returns one allocation.
func (r Reader) Alloc(id string) (*structs.Alloc, error) { return r.s.Snapshot().AllocByID(nil, id) }

// Node returns one node.
func (r Reader) Node(id string) (*structs.Node, error) { return r.s.Snapshot().NodeByID(nil, id) }

// Plugin returns one CSI plugin.
func (r Reader) Plugin(id string) (*structs.Plugin, error) {
	return r.s.Snapshot().PluginByID(nil, id)
}

// ReleasableVolumes lists the volumes with a claim whose allocation is
// terminal or gone.
func (r Reader) ReleasableVolumes() ([]structs.VolumeRef, error) {
	return r.s.Snapshot().ReleasableVolumes(nil)
}

// NodeOfMachine is the node that reports machine m, nil when none does (a
// node upsert refuses a second one).
func (r Reader) NodeOfMachine(m structs.Machine) (*structs.Node, error) {
	nodes, err := r.s.Snapshot().NodesByMachine(nil, m)
	if err != nil || len(nodes) == 0 {
		return nil, err
	}
	return nodes[0], nil
}
