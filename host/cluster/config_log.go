package cluster

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Raft refuses a snapshot while its committed configuration entry is past
// what the state machine applied, and logs the refusal as an error. The
// snapshot schedule asks first (configPending), so it needs the index of
// the newest configuration entry. Raft's public Stats reports it as
// "latest_configuration_index", but raft v1.8 fills that from a future
// that never sets the index: it is always "0", and the schedule's guard
// never held a snapshot back. configLog keeps the index itself.

// configLog is the raft log store, noting the index of the newest
// configuration entry that passes through it: written by an append, or
// read back by raft's scan of the log after its snapshot when a server
// starts (raft.NewRaft reads every entry past the snapshot for this same
// reason). An entry covered by a snapshot is applied already, so the
// entries after it are all that matter. A configuration entry deleted by
// a follower's truncation leaves the index higher than the log's: the
// guard then waits until the applied index passes it, which the leader's
// entries at those indexes bring.
type configLog struct {
	raft.LogStore
	latest atomic.Uint64
}

// newConfigLog wraps logs.
func newConfigLog(logs raft.LogStore) *configLog { return &configLog{LogStore: logs} }

// latestConfiguration is the index of the newest configuration entry seen
// (0: none since the last snapshot, when the server started).
func (l *configLog) latestConfiguration() uint64 { return l.latest.Load() }

func (l *configLog) note(e *raft.Log) {
	if e.Type != raft.LogConfiguration {
		return
	}
	for {
		cur := l.latest.Load()
		if e.Index <= cur || l.latest.CompareAndSwap(cur, e.Index) {
			return
		}
	}
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
