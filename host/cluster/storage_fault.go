package cluster

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// A full or read-only data dir fails raft's writes: the leader's log
// append fails (its write is answered with the error and it steps down),
// then every election fails to record its vote, and the API said only
// "no cluster leader" with nothing pointing at the disk (found by
// test/peers/e2e TestDiskFull). The log and stable stores are wrapped to
// remember their last failed write, until a write succeeds again; the
// refusals name it.

// storageFault remembers the raft stores' last failed write.
type storageFault struct {
	dir string
	mu  sync.Mutex
	err error
}

func (f *storageFault) record(err error) error {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
	return err
}

// get is the last write's error, nil once a write succeeded.
func (f *storageFault) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// faultLog is a raft.LogStore that records its writes' outcome.
type faultLog struct {
	raft.LogStore
	f *storageFault
}

func (l faultLog) StoreLog(log *raft.Log) error     { return l.f.record(l.LogStore.StoreLog(log)) }
func (l faultLog) StoreLogs(logs []*raft.Log) error { return l.f.record(l.LogStore.StoreLogs(logs)) }
func (l faultLog) DeleteRange(min, max uint64) error {
	return l.f.record(l.LogStore.DeleteRange(min, max))
}

// faultStable is a raft.StableStore that records its writes' outcome.
type faultStable struct {
	raft.StableStore
	f *storageFault
}

func (s faultStable) Set(key, val []byte) error { return s.f.record(s.StableStore.Set(key, val)) }
func (s faultStable) SetUint64(key []byte, val uint64) error {
	return s.f.record(s.StableStore.SetUint64(key, val))
}

// diskRefused reports whether err is the data dir refusing a write
// before any of it was stored (full, over quota, read-only). An I/O error
// (EIO) is not one: part of the write, or all of it, may be on the disk
// (an fsync that failed says nothing of what reached it), so its outcome
// is unknown (applyErr's default).
func diskRefused(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EDQUOT)
}

// StorageFault is the error of this server's last failed raft write
// (log or vote), nil once a write succeeded again.
func (c *Cluster) StorageFault() error {
	if c.storage == nil {
		return nil
	}
	return c.storage.get()
}

// noLeaderBecauseOfDisk is err (structs.ErrNoLeader, or an outcome
// unknown because leadership was lost) naming the disk when this server's
// last raft write failed: the server cannot lead or vote until its data
// dir takes writes again.
func (c *Cluster) noLeaderBecauseOfDisk(err error) error {
	fault := c.StorageFault()
	if fault == nil {
		return err
	}
	return fmt.Errorf("%w: this server cannot write its raft log or vote in %s: %v (it takes writes again once the disk does)",
		err, c.storage.dir, fault)
}

// diskApplyErr is a write refused because the leader could not append it
// to its own log: the entry was never stored, so never replicated; 503
// (a leader that can write will take it), naming the disk.
func diskApplyErr(err error) error {
	return fmt.Errorf("apply: %w: this server could not write the entry to its raft log, nothing was recorded: %w", structs.ErrNoLeader, err)
}
