package iradix

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"
)

// A transaction changes in place every node it made, however many it made:
// upstream forgot all but the last 8,192 and copied the others again (a
// snapshot restore's random keys, volhost's change in writable.go).
func TestWritableNodesAreNotCopiedAgainInALargeTxn(t *testing.T) {
	const keys = 50_000
	rnd := rand.New(rand.NewSource(1))
	names := make([][]byte, keys)
	for i := range names {
		names[i] = fmt.Appendf(nil, "vol-%016x", rnd.Uint64())
	}
	txn := New().Txn()
	for _, k := range names {
		txn.Insert(k, 1)
	}
	// Writing the first keys again: their paths were made by this
	// transaction, so only the new leaves are allocated (2 objects a key;
	// 7.9 when the paths were copied again).
	again := names[:1000]
	// (Counted once: testing.AllocsPerRun's warm-up run would make the
	// paths writable again first.)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, k := range again {
		txn.Insert(k, 2)
	}
	runtime.ReadMemStats(&after)
	if perKey := float64(after.Mallocs-before.Mallocs) / float64(len(again)); perKey > 3 {
		t.Fatalf("rewriting a key of a %d-key transaction allocates %.1f objects: its path was copied again", keys, perKey)
	}
	tree := txn.Commit()
	for _, k := range again {
		if v, _ := tree.Get(k); v != 2 {
			t.Fatalf("%s = %v after the rewrite, want 2", k, v)
		}
	}
	if tree.Len() != keys {
		t.Fatalf("tree holds %d keys, want %d", tree.Len(), keys)
	}
}
