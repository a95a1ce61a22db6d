package iradix

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"
)

// A transaction changes in place every node it made, however many it made:
// upstream forgot all but the last 8,192 and copied the others again (a
// snapshot restore's random keys, volhost's change in writable.go). Both
// ways of knowing its nodes: the set, for a transaction on a tree that
// holds keys, and owning all but the root it started from, for one on an
// empty tree.
func TestWritableNodesAreNotCopiedAgainInALargeTxn(t *testing.T) {
	for _, start := range []string{"empty", "one key"} {
		t.Run(start, func(t *testing.T) { writableNodesNotCopiedAgain(t, start) })
	}
}

func writableNodesNotCopiedAgain(t *testing.T, start string) {
	const keys = 50_000
	rnd := rand.New(rand.NewSource(1))
	names := make([][]byte, keys)
	for i := range names {
		names[i] = fmt.Appendf(nil, "vol-%016x", rnd.Uint64())
	}
	base, want := New(), keys
	if start == "one key" {
		base, _, _ = base.Insert([]byte("a-key-before"), 0)
		want++
	}
	txn := base.Txn()
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
	if start == "empty" && len(txn.writable) != 0 {
		t.Fatalf("a transaction from an empty tree noted %d nodes: it owns them all without a set", len(txn.writable))
	}
	tree := txn.Commit()
	for _, k := range again {
		if v, _ := tree.Get(k); v != 2 {
			t.Fatalf("%s = %v after the rewrite, want 2", k, v)
		}
	}
	if tree.Len() != want {
		t.Fatalf("tree holds %d keys, want %d", tree.Len(), want)
	}
}

// A transaction from an empty tree stops owning its nodes once it exposes
// them: a tree it committed, or a clone of it, keeps what it held while
// the transaction writes on (over the same keys, so the nodes it would
// change in place are the exposed ones).
func TestTxnFromEmptyTreeDoesNotChangeWhatItExposed(t *testing.T) {
	keys := make([][]byte, 2000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k-%05d", i*7919%10007)
	}
	fill := func(txn *Txn, v int) {
		for _, k := range keys {
			txn.Insert(k, v)
		}
		for _, k := range keys[:500] {
			txn.Delete(k)
		}
	}
	check := func(t *testing.T, what string, get func([]byte) (any, bool), v int) {
		t.Helper()
		for i, k := range keys {
			got, ok := get(k)
			if i < 500 {
				if ok {
					t.Fatalf("%s: %s = %v, want deleted", what, k, got)
				}
				continue
			}
			if !ok || got != v {
				t.Fatalf("%s: %s = %v (%v), want %d: the transaction changed it after exposing it", what, k, got, ok, v)
			}
		}
	}
	t.Run("commit", func(t *testing.T) {
		txn := New().Txn()
		fill(txn, 1)
		committed := txn.CommitOnly()
		fill(txn, 2)
		txn.Insert([]byte("k-"), 3) // a split above the committed keys
		check(t, "committed tree", committed.Get, 1)
		check(t, "transaction", txn.Get, 2)
	})
	t.Run("clone", func(t *testing.T) {
		txn := New().Txn()
		fill(txn, 1)
		clone := txn.Clone()
		fill(txn, 2)
		check(t, "clone", clone.Get, 1)
		fill(clone, 3)
		check(t, "transaction", txn.Get, 2)
		check(t, "clone written", clone.Get, 3)
	})
	t.Run("the empty root", func(t *testing.T) {
		empty := New()
		txn := empty.Txn()
		fill(txn, 1)
		if empty.Len() != 0 || !empty.root.isEmpty() {
			t.Fatalf("the empty tree the transaction started from holds %d keys", empty.Len())
		}
	})
}
