package iradix

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// A small write transaction (what go-memdb makes for each index a claim
// checkpoint touches) takes its two maps from the pools: it allocates a
// third fewer bytes than with maps made anew (12.8 against 19.8 KB here).
func TestSmallTxnsReuseTheirMaps(t *testing.T) {
	base := New().Txn()
	for i := range 10_000 {
		base.Insert(fmt.Appendf(nil, "k-%08d", i*7919%100_003), i)
	}
	tree := base.Commit()
	keys := make([][]byte, 16)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k-%08d", i*104_729%100_003)
	}
	bytesPerTxn := func(pooled bool) uint64 {
		poolMaps = pooled
		defer func() { poolMaps = true }()
		const txns = 2000
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range txns {
			txn := tree.Txn()
			txn.TrackMutate(true)
			for _, k := range keys {
				txn.Insert(k, 1)
			}
			txn.Commit()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / txns
	}
	made, pooled := bytesPerTxn(false), bytesPerTxn(true)
	limit := made * 4 / 5
	if raceEnabled {
		limit = made - 1
	}
	if pooled > limit {
		t.Fatalf("a 16-key transaction allocates %d bytes with pooled maps, %d with maps made anew: want at most %d", pooled, made, limit)
	}
}

// Transactions on many goroutines, each committing, cloning and
// notifying, never share a map: each tree holds exactly its own writes
// (run with -race: a map given back while its transaction still used it
// is a race as well as a wrong tree).
func TestPooledMapsAreNotShared(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			tree := New()
			for round := range 200 {
				txn := tree.Txn()
				txn.TrackMutate(true)
				for i := range 20 {
					txn.Insert(fmt.Appendf(nil, "g%d-k%03d", g, (round*7+i)%50), round)
				}
				clone := txn.Clone()
				clone.Insert([]byte("clone-only"), round)
				txn.Insert(fmt.Appendf(nil, "g%d-last", g), round)
				tree = txn.Commit()
				if _, ok := tree.Get([]byte("clone-only")); ok {
					t.Errorf("goroutine %d round %d: the clone's write is in the transaction's tree", g, round)
					return
				}
				if v, _ := tree.Get(fmt.Appendf(nil, "g%d-last", g)); v != round {
					t.Errorf("goroutine %d round %d: last = %v", g, round, v)
					return
				}
				c := clone.Commit()
				if v, _ := c.Get([]byte("clone-only")); v != round {
					t.Errorf("goroutine %d round %d: the clone's own write = %v", g, round, v)
					return
				}
				for i := range 20 {
					k := fmt.Appendf(nil, "g%d-k%03d", g, (round*7+i)%50)
					if a, b := tree.Get(k); a != round || !b {
						t.Errorf("goroutine %d round %d: %s = %v in the tree", g, round, k, a)
						return
					}
					if a, _ := c.Get(k); a != round {
						t.Errorf("goroutine %d round %d: %s = %v in the clone", g, round, k, a)
						return
					}
				}
			}
			if tree.Len() != 51 {
				t.Errorf("goroutine %d: %d keys, want 50 and the last", g, tree.Len())
			}
		})
	}
	wg.Wait()
}
