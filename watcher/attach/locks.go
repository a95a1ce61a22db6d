package attach

import (
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/keylock"
)

// VolumeLocks serialises, per volume on the leader, the claim path (its
// publish calls and the commit of the claim) with the watcher's per-node
// destructive steps (the re-check of committed state, NodeUnstageVolume or
// ControllerUnpublishVolume, and the checkpoint). Without it a claim could
// stage or publish on a node between the release's "last claim on this
// node" check and its NodeUnstage, and the unstage would pull the volume
// from under a running workload (a release pass racing a new claim on the
// same node). Across leaders the
// term fence does the same job: both sides only act in the term they
// confirmed. One value is shared by the claim path (host/server) and the
// watcher (host/agent wires it); each side's own lock would exclude
// nothing.
//
// Entries are dropped when unused, so the map does not grow with the
// number of volumes ever claimed. The zero value is ready to use.
type VolumeLocks struct {
	keylock.Set[structs.VolumeRef]
}

// NewVolumeLocks returns an empty set of locks.
func NewVolumeLocks() *VolumeLocks { return &VolumeLocks{} }

// Busy reports whether ref's lock is held or waited for. The release of a
// publishing claim waits while it is (the claim path may be publishing
// that claim); a claim path that starts after the check cannot take up a
// claim whose allocation ended, so the answer cannot go stale in a way
// that matters there.
func (l *VolumeLocks) Busy(ref structs.VolumeRef) bool { return l.Set.Busy(ref) }
