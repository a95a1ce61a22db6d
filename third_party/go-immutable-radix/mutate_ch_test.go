package iradix

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// volhost's lazy mutation channels (mutate_ch.go) keep upstream's rules.

// No key, inner node or copy made by a write has a channel until watched.
func TestMutateChMadeOnlyWhenWatched(t *testing.T) {
	r := New()
	txn := r.Txn()
	txn.TrackMutate(true)
	for _, k := range []string{"vol-1", "vol-2", "vol-10", "other"} {
		txn.Insert([]byte(k), k)
	}
	r = txn.Commit()
	made := 0
	for it := r.Root().rawIterator(); it.Front() != nil; it.Next() {
		n := it.Front()
		if n.mutateCh.p.Load() != nil {
			made++
		}
		if n.leaf != nil && n.leaf.mutateCh.p.Load() != nil {
			made++
		}
	}
	if made != 0 {
		t.Fatalf("%d channels made with no watcher", made)
	}
	ch, _, _ := r.Root().GetWatch([]byte("vol-1"))
	if ch == nil || isClosed(ch) {
		t.Fatal("a watch on a stored key must be an open channel")
	}
	if again, _, _ := r.Root().GetWatch([]byte("vol-1")); again != ch {
		t.Fatal("two watches of one leaf must share its channel")
	}
}

// A watch taken before the write that replaces its node is closed by the
// write's commit; one taken afterwards on the old tree (a reader of an
// older snapshot) is closed already, as upstream's channel would be.
func TestMutateChBeforeAndAfterCommit(t *testing.T) {
	r := New()
	r, _, _ = r.Insert([]byte("a"), 1)
	r, _, _ = r.Insert([]byte("b"), 2)
	before, _, _ := r.Root().GetWatch([]byte("a"))
	prefixBefore := r.Root().Iterator().SeekPrefixWatch([]byte("b"))

	txn := r.Txn()
	txn.TrackMutate(true)
	txn.Insert([]byte("a"), 10)
	txn.Insert([]byte("b"), 20)
	next := txn.Commit()

	if !isClosed(before) || !isClosed(prefixBefore) {
		t.Fatal("a watch taken before the commit was not closed by it")
	}
	after, _, _ := r.Root().GetWatch([]byte("b"))
	if !isClosed(after) {
		t.Fatal("a watch taken on the replaced tree after the commit must be closed")
	}
	fresh, _, _ := next.Root().GetWatch([]byte("b"))
	if isClosed(fresh) {
		t.Fatal("a watch on the new tree must be open")
	}
}

// The slow notify path (more nodes changed than the tracking map holds)
// closes the same watches.
func TestMutateChSlowNotify(t *testing.T) {
	useTrackLimit(t, defaultModifiedCache)
	r := New()
	txn := r.Txn()
	for i := range defaultModifiedCache * 2 {
		txn.Insert([]byte(keyOf(i)), i)
	}
	r = txn.Commit()
	w, _, _ := r.Root().GetWatch([]byte(keyOf(7)))
	txn = r.Txn()
	txn.TrackMutate(true)
	for i := range defaultModifiedCache * 2 {
		txn.Insert([]byte(keyOf(i)), -i)
	}
	if !txn.trackOverflow {
		t.Fatal("the transaction did not overflow its tracking map")
	}
	txn.Commit()
	if !isClosed(w) {
		t.Fatal("the slow notify did not close a watched leaf's channel")
	}
	if late, _, _ := r.Root().GetWatch([]byte(keyOf(9))); !isClosed(late) {
		t.Fatal("a watch taken after the slow notify on the old tree must be closed")
	}
}

// Readers racing to watch a node while a commit notifies it all end with
// a closed channel once the commit is done (run with -race).
func TestMutateChConcurrentWatchAndNotify(t *testing.T) {
	for range 50 {
		r := New()
		r, _, _ = r.Insert([]byte("k"), 1)
		var wg sync.WaitGroup
		got := make(chan (<-chan struct{}), 8)
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				ch, _, _ := r.Root().GetWatch([]byte("k"))
				got <- ch
			})
		}
		txn := r.Txn()
		txn.TrackMutate(true)
		txn.Insert([]byte("k"), 2)
		close(start)
		txn.Commit()
		wg.Wait()
		close(got)
		for ch := range got {
			if !isClosed(ch) {
				t.Fatal("a watch taken while the commit notified was left open after it")
			}
		}
	}
}

func keyOf(i int) string { return "key-" + strconv.Itoa(i) }

// A lookup without a watch makes no channel: Get, Txn.Get and SeekPrefix
// allocate nothing, and a node they reached stays one a transaction may
// change in place (upstream's Get called GetWatch and dropped the channel,
// which the lazy channels then made on every lookup).
func TestLookupsWithoutAWatchMakeNoChannel(t *testing.T) {
	tree := New()
	for _, k := range []string{"vol-a", "vol-b", "vol-c/1", "vol-c/2", "x"} {
		tree, _, _ = tree.Insert([]byte(k), k)
	}
	for name, lookup := range map[string]func(*Tree){
		"Get present":        func(t *Tree) { t.Get([]byte("vol-b")) },
		"Get absent":         func(t *Tree) { t.Get([]byte("vol-d")) },
		"Txn.Get":            func(t *Tree) { t.Txn().Get([]byte("vol-c/2")) },
		"SeekPrefix":         func(t *Tree) { t.Root().Iterator().SeekPrefix([]byte("vol-c")) },
		"reverse SeekPrefix": func(t *Tree) { t.Root().ReverseIterator().SeekPrefix([]byte("vol")) },
	} {
		// Each lookup on a tree of its own, whose nodes nothing has
		// looked up yet; an iterator or a transaction is one object,
		// a channel made would be two more (the channel and its box).
		fresh := New()
		for _, k := range []string{"vol-a", "vol-b", "vol-c/1", "vol-c/2", "x"} {
			fresh, _, _ = fresh.Insert([]byte(k), k)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		lookup(fresh)
		runtime.ReadMemStats(&after)
		if n := after.Mallocs - before.Mallocs; n > 1 {
			t.Errorf("%s allocates %d objects: it made a watch channel", name, n)
		}
	}
	// The watch still works where one is asked for.
	ch, _, _ := tree.Root().GetWatch([]byte("vol-b"))
	w := tree.Txn()
	w.TrackMutate(true)
	w.Insert([]byte("vol-b"), "again")
	w.Commit()
	select {
	case <-ch:
	default:
		t.Fatal("the watch on vol-b stayed open after a commit replaced it")
	}
}
