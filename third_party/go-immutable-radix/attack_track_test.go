package iradix

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// marked says whether m was closed (notified), without making a channel.
func marked(m *mutateCh) bool {
	p := m.p.Load()
	return p != nil && isClosed(*p)
}

type atNodes struct {
	nodes  map[*Node]string
	leaves map[*leafNode]string
}

func atCollect(tr *Tree) atNodes {
	s := atNodes{map[*Node]string{}, map[*leafNode]string{}}
	for it := tr.root.rawIterator(); it.Front() != nil; it.Next() {
		n := it.Front()
		s.nodes[n] = it.Path()
		if n.leaf != nil {
			s.leaves[n.leaf] = it.Path()
		}
	}
	return s
}

// atCheckNotified is the library's contract after a commit's Notify: a
// node or leaf of an old tree is closed iff the new tree no longer holds
// it, and nothing the new tree holds is closed.
func atCheckNotified(t *testing.T, what string, newTree *Tree, olds ...atNodes) {
	t.Helper()
	cur := atCollect(newTree)
	var errs []string
	for n, p := range cur.nodes {
		if marked(&n.mutateCh) {
			errs = append(errs, fmt.Sprintf("node %q of the new tree is closed", p))
		}
	}
	for l, p := range cur.leaves {
		if marked(&l.mutateCh) {
			errs = append(errs, fmt.Sprintf("leaf %q of the new tree is closed", p))
		}
	}
	for i, old := range olds {
		for n, p := range old.nodes {
			_, kept := cur.nodes[n]
			if marked(&n.mutateCh) == kept {
				errs = append(errs, fmt.Sprintf("old tree %d: node %q kept=%v closed=%v", i, p, kept, !kept))
			}
		}
		for l, p := range old.leaves {
			_, kept := cur.leaves[l]
			if marked(&l.mutateCh) == kept {
				errs = append(errs, fmt.Sprintf("old tree %d: leaf %q kept=%v closed=%v", i, p, kept, !kept))
			}
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		t.Fatalf("%s: %d wrong notifications, first: %v", what, len(errs), errs[:min(len(errs), 5)])
	}
}

func atCheckModel(t *testing.T, what string, tr *Tree, m map[string]int) {
	t.Helper()
	if tr.Len() != len(m) {
		t.Fatalf("%s: Len %d, model %d", what, tr.Len(), len(m))
	}
	var got []string
	tr.Root().Walk(func(k []byte, v interface{}) bool {
		got = append(got, string(k))
		if m[string(k)] != v.(int) {
			t.Fatalf("%s: %q = %v, model %d", what, k, v, m[string(k)])
		}
		return false
	})
	if want := slices.Sorted(maps.Keys(m)); !slices.Equal(got, want) {
		t.Fatalf("%s: %d keys, model %d", what, len(got), len(want))
	}
}

// A transaction that writes and then deletes everything (DeletePrefix of
// the empty prefix, as go-memdb's DeletePrefix with an empty prefix does)
// must leave its new, empty root open. deletePrefix tracked the channel of
// the node the search ends at before writeNode, which answers that node
// itself when the transaction made it (any earlier write copies the
// root): the root was emptied in place, stayed the new tree's root, and
// its commit closed it, so every watch on the emptied tree (what a
// blocking query on an empty table takes) was closed when taken. Found by
// an attack on the fork's tracking bound (trackLimit): the walk past the
// old bound closes only nodes of the old tree, so transactions that large
// never showed it, but a small one did, here and upstream. Run on both
// notify paths, with a large transaction and a small one.
func TestDeletePrefixOfEverythingLeavesTheNewRootOpen(t *testing.T) {
	for _, n := range []int{2, 20000} {
		t.Run(fmt.Sprintf("keys=%d", n), func(t *testing.T) { deleteEverything(t, n) })
	}
}

func deleteEverything(t *testing.T, n int) {
	bothNotifyPaths(t, func(t *testing.T, overflow bool) {
		overflow = overflow && n > defaultModifiedCache // a small transaction never overflows
		key := func(i int) []byte { return fmt.Appendf(nil, "%06d", i) }
		txn := New().Txn()
		for i := range n {
			txn.Insert(key(i), i)
		}
		tree := txn.Commit()
		old := atCollect(tree)
		oldKey, _, _ := tree.Root().GetWatch(key(7))

		txn = tree.Txn()
		txn.TrackMutate(true)
		for i := range n {
			txn.Delete(key(i))
		}
		txn.Insert([]byte("x"), 1)
		txn.DeletePrefix(nil)
		if txn.trackOverflow != overflow {
			t.Fatalf("overflow %v, want %v", txn.trackOverflow, overflow)
		}
		tree2 := txn.Commit()
		if tree2.Len() != 0 {
			t.Fatalf("Len %d", tree2.Len())
		}
		if !isClosed(oldKey) {
			t.Fatal("a deleted key's watch on the old tree is open")
		}
		get, _, _ := tree2.Root().GetWatch([]byte("x"))
		seek := tree2.Root().Iterator().SeekPrefixWatch(nil)
		if isClosed(get) || isClosed(seek) {
			t.Fatalf("watches on the new empty tree closed at once: GetWatch %v SeekPrefixWatch %v (overflow=%v)",
				isClosed(get), isClosed(seek), overflow)
		}
		atCheckNotified(t, "old -> new", tree2, old)
	})
}

// Random large transactions (inserts, deletes, DeletePrefix of subtrees;
// from an empty tree and from a full one), on both notify paths: every
// node and leaf of the old tree is closed iff the new tree lost it, none
// of the new tree is, and both trees read as the model says.
func TestLargeTxnNotifiesExactlyWhatItReplaced(t *testing.T) {
	bothNotifyPaths(t, func(t *testing.T, overflow bool) {
		for seed := int64(1); seed <= 6; seed++ {
			rnd := rand.New(rand.NewSource(seed))
			key := func() string {
				return fmt.Sprintf("%c%d/%d", 'a'+rnd.Intn(4), rnd.Intn(40), rnd.Intn(60))
			}
			model := map[string]int{}
			tree := New()
			if seed%2 == 0 {
				txn := tree.Txn()
				for range 5000 {
					k := key()
					txn.Insert([]byte(k), len(k))
					model[k] = len(k)
				}
				tree = txn.Commit()
			}
			for round := range 3 {
				old := atCollect(tree)
				oldModel := maps.Clone(model)
				txn := tree.Txn()
				txn.TrackMutate(true)
				v := 0
				for range 9000 {
					k := key()
					v++
					switch rnd.Intn(12) {
					case 0, 1, 2, 3, 4, 5:
						txn.Insert([]byte(k), v)
						model[k] = v
					case 6, 7, 8, 9:
						txn.Delete([]byte(k))
						delete(model, k)
					case 10:
						if rnd.Intn(40) != 0 {
							continue
						}
						p := k[:2+rnd.Intn(3)]
						txn.DeletePrefix([]byte(p))
						for mk := range model {
							if strings.HasPrefix(mk, p) {
								delete(model, mk)
							}
						}
					default:
						txn.Get([]byte(k))
					}
				}
				// (a transaction from the empty tree owns its nodes and
				// tracks next to nothing)
				if len(old.nodes) > 1 && txn.trackOverflow != overflow {
					t.Fatalf("seed %d round %d: overflow %v, want %v", seed, round, txn.trackOverflow, overflow)
				}
				tree2 := txn.Commit()
				what := fmt.Sprintf("seed %d round %d overflow=%v", seed, round, overflow)
				atCheckModel(t, what+" new", tree2, model)
				atCheckModel(t, what+" old", tree, oldModel)
				atCheckNotified(t, what, tree2, old)
				tree = tree2
			}
		}
	})
}

type atOps struct {
	rnd   *rand.Rand
	model map[string]int
	v     int
	// watches taken inside the transaction, by the channel they watch
	inTxn map[*mutateCh]<-chan struct{}
}

func (o *atOps) key() string {
	return fmt.Sprintf("%c%d/%d", 'a'+o.rnd.Intn(4), o.rnd.Intn(40), o.rnd.Intn(60))
}

func (o *atOps) run(txn *Txn, n int) {
	for range n {
		k := o.key()
		o.v++
		switch o.rnd.Intn(12) {
		case 0, 1, 2, 3, 4, 5:
			txn.Insert([]byte(k), o.v)
			o.model[k] = o.v
		case 6, 7, 8, 9:
			txn.Delete([]byte(k))
			delete(o.model, k)
		case 10:
			if o.rnd.Intn(40) != 0 {
				continue
			}
			p := k[:2+o.rnd.Intn(3)]
			txn.DeletePrefix([]byte(p))
			for mk := range o.model {
				if strings.HasPrefix(mk, p) {
					delete(o.model, mk)
				}
			}
		default:
			if o.inTxn != nil && o.rnd.Intn(4) == 0 {
				m, _, _ := txn.Root().get([]byte(k))
				ch, _, _ := txn.GetWatch([]byte(k))
				o.inTxn[m] = ch
			}
		}
	}
}

// A large tracked transaction with CommitOnly in the middle and writes
// after it, Notify twice, then the transaction reused after its commit:
// the intermediate tree's replaced nodes are closed too, its kept ones
// are not, and every tree still reads its model.
func TestLargeTxnCommitOnlyMidwayNotifyTwiceAndReuse(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		o := &atOps{rnd: rand.New(rand.NewSource(seed)), model: map[string]int{}}
		txn := New().Txn()
		o.run(txn, 6000)
		t0 := txn.Commit()
		m0 := maps.Clone(o.model)
		c0 := atCollect(t0)

		txn = t0.Txn()
		txn.TrackMutate(true)
		o.run(txn, 9000)
		t1 := txn.CommitOnly()
		m1 := maps.Clone(o.model)
		c1 := atCollect(t1)
		o.run(txn, 9000) // keeps writing after CommitOnly
		if txn.trackOverflow {
			t.Fatal("overflowed")
		}
		t2 := txn.CommitOnly()
		m2 := maps.Clone(o.model)
		txn.Notify()
		txn.Notify()
		atCheckModel(t, "t0", t0, m0)
		atCheckModel(t, "t1", t1, m1)
		atCheckModel(t, "t2", t2, m2)
		atCheckNotified(t, fmt.Sprintf("seed %d: t0,t1 -> t2", seed), t2, c0, c1)

		// Reuse after the commit.
		c2 := atCollect(t2)
		o.run(txn, 9000)
		t3 := txn.Commit()
		atCheckModel(t, "t3", t3, o.model)
		atCheckModel(t, "t2 again", t2, m2)
		atCheckNotified(t, fmt.Sprintf("seed %d: t2 -> t3", seed), t3, c2)
	}
}

// atCheckWatches: a watch (by the channel it took) is closed iff the new
// tree no longer holds the node or leaf it watched.
func atCheckWatches(t *testing.T, what string, newTree *Tree, ws map[*mutateCh]<-chan struct{}) {
	t.Helper()
	cur := atCollect(newTree)
	held := map[*mutateCh]bool{}
	for n := range cur.nodes {
		held[&n.mutateCh] = true
	}
	for l := range cur.leaves {
		held[&l.mutateCh] = true
	}
	bad := 0
	for m, ch := range ws {
		if isClosed(ch) == held[m] {
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d watches wrong", what, bad, len(ws))
	}
}

// Watches taken inside a large tracked transaction on nodes it made are
// closed by its commit iff those nodes are gone.
func TestLargeTxnClosesItsOwnInTxnWatches(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		o := &atOps{rnd: rand.New(rand.NewSource(seed)), model: map[string]int{}}
		tree := New()
		if seed%2 == 0 {
			txn := tree.Txn()
			o.run(txn, 6000)
			tree = txn.Commit()
		}
		c0 := atCollect(tree)
		o.inTxn = map[*mutateCh]<-chan struct{}{}
		txn := tree.Txn()
		txn.TrackMutate(true)
		o.run(txn, 20000)
		if txn.trackOverflow || len(txn.trackChannels) <= defaultModifiedCache {
			t.Fatalf("seed %d: overflow %v tracked %d", seed, txn.trackOverflow, len(txn.trackChannels))
		}
		t1 := txn.Commit()
		atCheckModel(t, "t1", t1, o.model)
		atCheckNotified(t, fmt.Sprintf("seed %d", seed), t1, c0)
		atCheckWatches(t, fmt.Sprintf("seed %d in-txn watches", seed), t1, o.inTxn)
	}
}

// Readers take watches on the old tree while a large tracked transaction
// from it commits and notifies, and a second large transaction from the
// same tree runs in another goroutine (pooled maps on both): every
// reader's watch is closed iff what it watched is gone from one of the
// trees made from it. Run with -race.
func TestLargeTxnsConcurrentWithReadersWatchingTheOldTree(t *testing.T) {
	o := &atOps{rnd: rand.New(rand.NewSource(5)), model: map[string]int{}}
	txn := New().Txn()
	o.run(txn, 8000)
	t0 := txn.Commit()
	m0 := maps.Clone(o.model)

	const readers = 4
	stop := make(chan struct{})
	got := make([]map[*mutateCh]<-chan struct{}, readers)
	done := make(chan int)
	for r := range readers {
		go func() {
			rnd := rand.New(rand.NewSource(int64(100 + r)))
			ws := map[*mutateCh]<-chan struct{}{}
			for i := 0; ; i++ {
				k := fmt.Sprintf("%c%d/%d", 'a'+rnd.Intn(4), rnd.Intn(40), rnd.Intn(60))
				if rnd.Intn(3) == 0 {
					k = k[:1+rnd.Intn(len(k)-1)]
				}
				m, _, _ := t0.Root().get([]byte(k))
				ch, _, _ := t0.Root().GetWatch([]byte(k))
				ws[m] = ch
				if i%64 == 0 {
					select {
					case <-stop:
						got[r] = ws
						done <- r
						return
					default:
					}
				}
			}
		}()
	}
	var t2 *Tree
	var m2 map[string]int
	var t2s []*Tree
	second := make(chan struct{})
	go func() {
		defer close(second)
		o2 := &atOps{rnd: rand.New(rand.NewSource(77)), model: maps.Clone(m0)}
		for range 3 {
			tx := t0.Txn()
			tx.TrackMutate(true)
			o2.run(tx, 12000)
			if tx.trackOverflow || len(tx.trackChannels) <= defaultModifiedCache {
				panic(fmt.Sprintf("second txn: overflow %v tracked %d", tx.trackOverflow, len(tx.trackChannels)))
			}
			t2 = tx.CommitOnly()
			t2s = append(t2s, t2)
			tx.Notify()
			m2 = maps.Clone(o2.model)
			o2.model = maps.Clone(m0)
		}
	}()
	tx := t0.Txn()
	tx.TrackMutate(true)
	o.run(tx, 12000)
	t1 := tx.Commit()
	<-second
	close(stop)
	all := map[*mutateCh]<-chan struct{}{}
	for range readers {
		maps.Copy(all, got[<-done])
	}
	atCheckModel(t, "t0", t0, m0)
	atCheckModel(t, "t1", t1, o.model)
	atCheckModel(t, "t2", t2, m2)
	in := map[*mutateCh]int{}
	for _, tr := range append([]*Tree{t1}, t2s...) {
		c := atCollect(tr)
		for n := range c.nodes {
			in[&n.mutateCh]++
		}
		for l := range c.leaves {
			in[&l.mutateCh]++
		}
	}
	bad := 0
	for m, ch := range all {
		// kept by every tree made from t0: open; gone from any: closed.
		if isClosed(ch) != (in[m] < 1+len(t2s)) {
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d reader watches wrong", bad, len(all))
	}
	t.Logf("%d reader watches checked", len(all))
}
