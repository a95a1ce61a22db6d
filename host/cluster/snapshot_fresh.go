package cluster

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A follower too far behind the leader's log (wiped, new, or back after the
// log was compacted) is sent the leader's latest snapshot, then every entry
// after it. Servers snapshot in turns (snapshot_schedule.go), so that
// snapshot may be a whole schedule period old: in TestScaleCluster a wiped
// follower at 300,000 volumes installed a snapshot 12,400 entries behind
// and spent 5.5 s of its 8.3 s rejoin applying them one by one, more than
// the snapshot's own restore; at 1,000,000 volumes 9 of its 20 s. An entry
// costs a follower about what it cost the leader, a snapshot's encoding is
// the same at any age, so the leader sends a fresh one when its latest
// lags its applied state by a snapshot threshold of entries or more:
// raft reads the store's List only to pick the snapshot it sends (after
// the start-up restore), and freshSnapshots takes a snapshot there first.
// etcd bounds the same tail by snapshotting every snapshot-count entries.
//
// That snapshot is taken outside the servers' turns: the follower it is
// for has nothing to snapshot, so at most the other servers' scheduled
// snapshot runs beside it.

// freshSnapshots is the snapshot store raft uses, with List taking a new
// snapshot first when the newest one lags.
type freshSnapshots struct {
	raft.SnapshotStore
	// gap is the lag of the newest snapshot behind the applied index, in
	// entries, at which List takes a new one (0: never).
	gap    uint64
	raft   atomic.Pointer[raft.Raft] // set once NewRaft returned
	logger hclog.Logger
}

// List implements raft.SnapshotStore.
func (s *freshSnapshots) List() ([]*raft.SnapshotMeta, error) {
	metas, err := s.SnapshotStore.List()
	r := s.raft.Load()
	if err != nil || r == nil || s.gap == 0 || r.State() != raft.Leader {
		return metas, err
	}
	var newest uint64
	if len(metas) > 0 {
		newest = metas[0].Index
	}
	applied := r.AppliedIndex()
	if applied < newest+s.gap {
		return metas, nil
	}
	start := time.Now()
	switch err := r.Snapshot().Error(); {
	case err == nil:
		s.logger.Info("snapshot taken for a follower that needs one", "lagged_entries", applied-newest, "took", time.Since(start))
		return s.SnapshotStore.List()
	case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown):
	default:
		// A configuration change in flight, a full disk: the newest
		// snapshot still serves, only the follower's catch-up is longer.
		s.logger.Warn("could not take a fresh snapshot for a follower; sending the newest", "error", err)
	}
	return metas, nil
}
