package cluster

import (
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// Raft refuses a snapshot while its committed configuration entry is past
// what the state machine applied, and logs the refusal as an error. The
// snapshot schedule asks first (configPending), so it needs the index of
// the newest configuration entry. Raft's public Stats reports it as
// "latest_configuration_index", but raft v1.8 fills that from a future
// that never sets the index: it is always "0", and the schedule's guard
// never held a snapshot back. configLog keeps the index itself.

// configLog is the raft log store, noting the indexes of the
// configuration entries that pass through it: written by an append, or
// read back by raft's scan of the log after its snapshot when a server
// starts (raft.NewRaft reads every entry past the snapshot for this same
// reason). An entry covered by a snapshot is applied already, so the
// entries after it are all that matter.
//
// A deleted entry is forgotten: a follower whose log conflicts with a new
// leader's deletes its tail (raft's DeleteRange), and a leader cut off
// from the others may have written a configuration entry there that no
// server will ever apply. Kept, it held every snapshot back until the
// cluster's log grew past its index, as many entries as the deleted tail
// held (TestConfigLogAttackDeletedConfigurationHoldsScheduledSnapshots).
// The compaction after a snapshot deletes the log's head the same way;
// what it deletes is applied.
type configLog struct {
	raft.LogStore

	mu      sync.Mutex
	indexes []uint64 // the configuration entries in the log, ascending
}

// newConfigLog wraps logs.
func newConfigLog(logs raft.LogStore) *configLog { return &configLog{LogStore: logs} }

// latestConfiguration is the index of the newest configuration entry in
// the log (0: none since the last snapshot, when the server started).
func (l *configLog) latestConfiguration() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.indexes); n > 0 {
		return l.indexes[n-1]
	}
	return 0
}

func (l *configLog) note(e *raft.Log) {
	if e.Type != raft.LogConfiguration {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	i, found := slices.BinarySearch(l.indexes, e.Index)
	if !found {
		l.indexes = slices.Insert(l.indexes, i, e.Index)
	}
}

// DeleteRange implements raft.LogStore.
func (l *configLog) DeleteRange(lo, hi uint64) error {
	if err := l.LogStore.DeleteRange(lo, hi); err != nil {
		// What is left is unknown: keep every noted entry, which can
		// only hold a snapshot back, never let raft refuse one.
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.indexes = slices.DeleteFunc(l.indexes, func(i uint64) bool { return lo <= i && i <= hi })
	return nil
}

// GetLog implements raft.LogStore.
func (l *configLog) GetLog(index uint64, e *raft.Log) error {
	if err := l.LogStore.GetLog(index, e); err != nil {
		return err
	}
	l.note(e)
	return nil
}

// StoreLog implements raft.LogStore.
func (l *configLog) StoreLog(e *raft.Log) error {
	if err := l.LogStore.StoreLog(e); err != nil {
		return err
	}
	l.note(e)
	return nil
}

// StoreLogs implements raft.LogStore.
func (l *configLog) StoreLogs(es []*raft.Log) error {
	if err := l.LogStore.StoreLogs(es); err != nil {
		return err
	}
	for _, e := range es {
		l.note(e)
	}
	return nil
}
