package iradix

import (
	"fmt"
	"runtime"
	"testing"
)

// useTrackLimit bounds the transactions' mutation notify maps at n for
// the rest of t (the package's tests do not run in parallel).
func useTrackLimit(t *testing.T, n int) {
	old := trackLimit
	trackLimit = n
	t.Cleanup(func() { trackLimit = old })
}

// bothNotifyPaths runs f twice as subtests: with upstream's bound of
// 8,192 tracked channels, so that a large transaction overflows and its
// commit walks the trees (overflow), and with the fork's, so that it is
// tracked.
func bothNotifyPaths(t *testing.T, f func(t *testing.T, overflow bool)) {
	for _, overflow := range []bool{true, false} {
		t.Run(fmt.Sprintf("overflow=%v", overflow), func(t *testing.T) {
			if overflow {
				useTrackLimit(t, defaultModifiedCache)
			}
			f(t, overflow)
		})
	}
}

// A transaction that replaces more nodes than upstream's 8,192 (a trim of
// 3,125 events of a 200,000-event table replaces more) keeps tracking them,
// so its commit closes what it changed without walking the whole tree:
// upstream's walk builds every node's path as a string, an allocation per
// node of both trees.
func TestLargeTxnNotifiesWithoutWalkingTheTree(t *testing.T) {
	const n, deleted = 100_000, 10_000
	key := func(i int) []byte { return fmt.Appendf(nil, "%016x", i) }
	txn := New().Txn()
	for i := range n {
		txn.Insert(key(i), i)
	}
	tree := txn.Commit()
	gone, _, _ := tree.Root().GetWatch(key(deleted - 1))
	kept, _, _ := tree.Root().GetWatch(key(n - 1))

	txn = tree.Txn()
	txn.TrackMutate(true)
	for i := range deleted {
		txn.Delete(key(i))
	}
	if txn.trackOverflow || len(txn.trackChannels) <= defaultModifiedCache {
		t.Fatalf("overflow = %v with %d channels tracked: want more than %d tracked and no overflow",
			txn.trackOverflow, len(txn.trackChannels), defaultModifiedCache)
	}
	tree2 := txn.CommitOnly()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	txn.Notify()
	runtime.ReadMemStats(&after)
	if allocs := after.Mallocs - before.Mallocs; allocs > 1000 {
		t.Fatalf("Notify allocated %d objects: it walked the %d-key tree", allocs, n)
	}
	if !isClosed(gone) || isClosed(kept) {
		t.Fatalf("a deleted key's watch closed=%v (want true), a kept key's closed=%v (want false)", isClosed(gone), isClosed(kept))
	}
	if tree2.Len() != n-deleted {
		t.Fatalf("Len %d, want %d", tree2.Len(), n-deleted)
	}
}

// BenchmarkTrackedSetAtTheLimit: the memory of a transaction's tracked
// set at trackLimit, the most a commit's notify holds before it walks the
// trees instead (reported in MB: in use once built, and allocated while
// it grew).
//
//	go test -run '^$' -bench '^BenchmarkTrackedSetAtTheLimit$' -benchtime 3x .
func BenchmarkTrackedSetAtTheLimit(b *testing.B) {
	chs := make([]mutateCh, trackLimit)
	var inUse, grown float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := channelSet{}
		for i := range chs {
			s[&chs[i]] = struct{}{}
		}
		runtime.ReadMemStats(&after)
		inUse += float64(after.HeapAlloc - before.HeapAlloc)
		grown += float64(after.TotalAlloc - before.TotalAlloc)
		runtime.KeepAlive(s)
	}
	b.ReportMetric(inUse/float64(b.N)/1e6, "MB-in-use")
	b.ReportMetric(grown/float64(b.N)/1e6, "MB-allocated")
}
