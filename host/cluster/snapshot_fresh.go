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

// A snapshot that fails (a full disk, at its fsync or rename) leaves the
// newest one to send; the next attempt waits for another gap of entries
// applied rather than encode the whole state again at every replication
// attempt (raft retries every 10 ms, doubling up to 10 s).

// Nor is it taken while a peer is unreachable. raft reads List before it
// dials, so a leader sending a snapshot to a follower that is down took a
// fresh one, failed to connect, and took another at its next attempt once
// a gap of entries had been applied: at 1,000,000 volumes five seconds of
// CPU and 300 MB written for each, for as long as the follower stayed
// away. List does not know which follower it is for, so while any peer's
// last dial failed the newest snapshot is sent as it is: a follower that
// needs one while another is down catches up from an older snapshot and a
// longer tail, never from a wrong one.

// freshSnapshots is the snapshot store raft uses, with List taking a new
// snapshot first when the newest one lags, and every snapshot's writing
// seen by the gate.
type freshSnapshots struct {
	raft.SnapshotStore
	// gap is the lag of the newest snapshot behind the applied index, in
	// entries, at which List takes a new one (0: never).
	gap    uint64
	gate   *snapshotGate
	raft   atomic.Pointer[raft.Raft] // set once NewRaft returned
	logger hclog.Logger
	// reach says whether a peer is unreachable (nil: never; a transport
	// that is not raft's network transport, as in tests).
	reach interface{ unreachable() bool }

	tried uint64 // the applied index of List's last snapshot, taken or failed (under gate.decide)
}

// Create implements raft.SnapshotStore.
func (s *freshSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	end := s.gate.started()
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		end()
		return nil, err
	}
	return &gatedSink{SnapshotSink: sink, end: end}, nil
}

// newest is the index of the newest snapshot in the store (0: none, or
// the store cannot be listed).
func (s *freshSnapshots) newest() uint64 {
	metas, err := s.SnapshotStore.List()
	if err != nil || len(metas) == 0 {
		return 0
	}
	return metas[0].Index
}

// stale reports whether a snapshot at index lags this leader's applied
// state by a gap of entries or more: a fresh one would be taken for a
// follower now (the reach transport asks for a send it held).
func (s *freshSnapshots) stale(index uint64) bool {
	r := s.raft.Load()
	return r != nil && s.gap != 0 && r.State() == raft.Leader && r.AppliedIndex() >= index+s.gap
}

// List implements raft.SnapshotStore.
func (s *freshSnapshots) List() ([]*raft.SnapshotMeta, error) {
	r := s.raft.Load()
	if r == nil || s.gap == 0 || r.State() != raft.Leader {
		return s.SnapshotStore.List()
	}
	if s.reach != nil && s.reach.unreachable() {
		s.logger.Debug("a peer is unreachable: sending the newest snapshot without taking a fresh one")
		return s.SnapshotStore.List()
	}
	var lagged uint64
	start := time.Now()
	taken, err := s.gate.take(r, func() bool {
		newest, applied := s.newest(), r.AppliedIndex()
		if applied < newest+s.gap || applied < s.tried+s.gap {
			return false
		}
		s.tried, lagged = applied, applied-newest
		return true
	})
	switch {
	case !taken, errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown):
	case err == nil:
		s.logger.Info("snapshot taken for a follower that needs one", "lagged_entries", lagged, "took", time.Since(start))
	default:
		// A configuration change in flight, a full disk: the newest
		// snapshot still serves, only the follower's catch-up is longer.
		s.logger.Warn("could not take a fresh snapshot for a follower; sending the newest", "error", err)
	}
	return s.SnapshotStore.List()
}
