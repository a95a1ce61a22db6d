package attach

import (
	"context"
	"sync"

	"github.com/volhost/volhost/host/structs"
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
	mu    sync.Mutex
	locks map[structs.VolumeRef]*volumeLock
}

type volumeLock struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

// NewVolumeLocks returns an empty set of locks.
func NewVolumeLocks() *VolumeLocks { return &VolumeLocks{} }

// Lock takes ref's lock, waiting at most until ctx ends, and returns the
// unlock function.
func (l *VolumeLocks) Lock(ctx context.Context, ref structs.VolumeRef) (func(), error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[structs.VolumeRef]*volumeLock)
	}
	e := l.locks[ref]
	if e == nil {
		e = &volumeLock{ch: make(chan struct{}, 1)}
		l.locks[ref] = e
	}
	e.refs++
	l.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; l.drop(ref, e) }, nil
	case <-ctx.Done():
		l.drop(ref, e)
		return nil, ctx.Err()
	}
}

func (l *VolumeLocks) drop(ref structs.VolumeRef, e *volumeLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(l.locks, ref)
	}
}

// Busy reports whether ref's lock is held or waited for. The release of a
// publishing claim waits while it is (the claim path may be publishing
// that claim); a claim path that starts after the check cannot take up a
// claim whose allocation ended, so the answer cannot go stale in a way
// that matters there.
func (l *VolumeLocks) Busy(ref structs.VolumeRef) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.locks[ref] != nil
}
