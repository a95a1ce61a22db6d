package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// Raft reads back every entry it has just appended: the leader once per
// follower to send it (replication's GetLog), each follower once to apply
// it (processLogs). Read from the bbolt log, each is a read transaction
// and a msgpack decode into fresh memory: at 1,000,000 volumes the
// leader allocated 129 KB per release with them and 112 KB without
// (BENCHMARKS.md "Raft's newest entries read from memory, and one
// snapshot per turn"), and every byte allocated there costs the
// collector the marking of a large heap.
// Consul and Nomad keep the newest entries in memory for this
// (raft.NewLogCache, 512).
//
// logCache is that ring, written here rather than taken from raft because
// raft's LogCache flattens the store's error into a string (%q), and a
// write refused by a full disk must reach the caller as ENOSPC: the leader
// then answers that nothing was recorded (diskRefused), where any other
// error's outcome is unknown. A ring slot holds the entry whose index maps
// to it, so a read is a hit only for that exact index; a deleted range
// (compaction, or a follower's conflicting tail) is dropped from the ring
// before it is deleted from the store, so no read returns an entry the
// log no longer holds.
type logCache struct {
	raft.LogStore

	mu       sync.RWMutex
	ring     []*raft.Log
	bytes    int // Data held by ring
	maxBytes int
}

// Ring bounds: raft sends at most MaxAppendEntries (64) entries per
// append, so a follower keeping up reads within the last few batches. The
// byte bound holds a burst of large entries (a volume load's entries are
// 300-500 KB each) to a few tens of MiB of heap; past it the oldest slots
// are emptied, and a read of them goes to the store as before.
const (
	logCacheEntries = 256
	logCacheBytes   = 32 << 20
)

func newLogCache(store raft.LogStore, entries, maxBytes int) *logCache {
	return &logCache{LogStore: store, ring: make([]*raft.Log, entries), maxBytes: maxBytes}
}

func (c *logCache) slot(index uint64) int { return int(index % uint64(len(c.ring))) }

// GetLog implements raft.LogStore.
func (c *logCache) GetLog(index uint64, e *raft.Log) error {
	c.mu.RLock()
	cached := c.ring[c.slot(index)]
	c.mu.RUnlock()
	if cached != nil && cached.Index == index {
		*e = *cached
		return nil
	}
	return c.LogStore.GetLog(index, e)
}

// StoreLog implements raft.LogStore.
func (c *logCache) StoreLog(e *raft.Log) error { return c.StoreLogs([]*raft.Log{e}) }

// StoreLogs implements raft.LogStore. Only entries the store took are
// cached; its error is returned as it is.
func (c *logCache) StoreLogs(es []*raft.Log) error {
	if err := c.LogStore.StoreLogs(es); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range es {
		if len(e.Data) > c.maxBytes/8 {
			continue // one entry must not empty the ring
		}
		i := c.slot(e.Index)
		c.drop(i)
		c.ring[i] = e
		c.bytes += len(e.Data)
		// Past the byte bound, empty the slots after this one: the
		// oldest entries, since appends come in index order.
		for j := (i + 1) % len(c.ring); c.bytes > c.maxBytes && j != i; j = (j + 1) % len(c.ring) {
			c.drop(j)
		}
	}
	return nil
}

func (c *logCache) drop(i int) {
	if old := c.ring[i]; old != nil {
		c.bytes -= len(old.Data)
		c.ring[i] = nil
	}
}

// DeleteRange implements raft.LogStore.
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	for i, e := range c.ring {
		if e != nil && lo <= e.Index && e.Index <= hi {
			c.drop(i)
		}
	}
	c.mu.Unlock()
	return c.LogStore.DeleteRange(lo, hi)
}
