package cluster

import (
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// The raft log is a bbolt file. Entries are appended, and a snapshot
// compacts the log by deleting those it covers; their pages go on bbolt's
// freelist, which by default is written out whole on every commit (the
// array freelist copied into newly allocated pages, its pending IDs merged
// into it). Loading 1,000,000 volumes 1,000 per request appends about
// 500 MB of entries, so after the first compaction every later commit,
// each claim's entries included, wrote a freelist of some 120,000 page
// IDs: at 1,000,000 volumes during the claim load bbolt's commits were
// 13-18% of the servers' CPU, and the collector, marking the 2 GiB state
// again and again, 18-45% (perf profiles of the servers; RATIONALE.md
// "Why is the raft log's bolt freelist neither synced nor an array?").
// The cost of a write grew with the log the state's load had left
// behind (BenchmarkLogStoreAfterCompaction).
//
// So the freelist is not synced (bbolt rebuilds it at open by walking the
// file's pages: a restart reads the whole log file once more) and is kept
// as a hash map, whose allocations do not scan the free list: what Consul
// offers for large raft logs (raft_boltdb NoFreelistSync) and etcd's
// backend defaults to. A file written either way opens either way.
func openLogStore(path string) (*raftboltdb.BoltStore, error) {
	return raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: logStoreBoltOptions()})
}

func logStoreBoltOptions() *bbolt.Options {
	return &bbolt.Options{NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}
}
