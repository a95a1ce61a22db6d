package iradix

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"sync"
	"testing"
)

// Attack tests for the fork's "a transaction from an empty tree owns every
// node but its root" (writable.go, ownsNode) and its pooled maps (pool.go).
// They judge only by what the public API shows: values read back,
// iteration, Len, channels closed or not. Each also passes on upstream
// go-immutable-radix v1.3.1.

func treeKeys(t *Tree) []string {
	var out []string
	t.Root().Walk(func(k []byte, v interface{}) bool {
		out = append(out, fmt.Sprintf("%s=%v", k, v))
		return false
	})
	return out
}

func iterKeys(it *Iterator) []string {
	var out []string
	for k, v, ok := it.Next(); ok; k, v, ok = it.Next() {
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	return out
}

func modelKeys(m map[string]int) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return out
}

// DeletePrefix in a transaction started from an empty tree: the node the
// prefix ends at was made by insert (a new leaf, or a split), which the
// fork's transaction owns and clears in place before counting what was
// under it. The committed tree is empty of those keys but Len still counts
// them. Upstream copies that node (it was never in its writable set) and
// counts the original.
func TestAttackFromEmptyDeletePrefixKeepsLen(t *testing.T) {
	cases := []struct {
		name   string
		keys   []string
		prefix string
	}{
		{"leaf made by insert", []string{"foo"}, "fo"},
		{"split node", []string{"foo/1", "foo/2", "zed"}, "foo/"},
		{"prefix inside a split node's prefix", []string{"volume-a", "volume-b", "x"}, "vol"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			txn := New().Txn()
			for i, k := range c.keys {
				txn.Insert([]byte(k), i)
			}
			if !txn.DeletePrefix([]byte(c.prefix)) {
				t.Fatalf("DeletePrefix(%q) deleted nothing", c.prefix)
			}
			tree := txn.Commit()
			got := treeKeys(tree)
			if tree.Len() != len(got) {
				t.Fatalf("after DeletePrefix(%q) of %q the tree holds %d keys %v but Len() = %d", c.prefix, c.keys, len(got), got, tree.Len())
			}
			// And the error carries over to every later tree.
			tree2, _, _ := tree.Insert([]byte("later"), 9)
			if tree2.Len() != len(got)+1 {
				t.Fatalf("a later tree with %d keys has Len() = %d", len(got)+1, tree2.Len())
			}
		})
	}
}

// A watch taken inside a transaction from an empty tree (Txn.GetWatch) on
// a node insert made: a later insert in the same transaction changes that
// node. Upstream copies it (insert's nodes are not in its writable set)
// and its commit's Notify closes the watch; the fork changes it in place,
// tracks nothing, and the watcher is never woken although the key it
// looked for now exists.
func TestAttackFromEmptyTxnWatchClosedByCommit(t *testing.T) {
	cases := []struct {
		name   string
		before []string
		watch  string
	}{
		{"under a leaf node", []string{"a"}, "ab"},
		{"under a split node", []string{"foo1", "foo2"}, "foo3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			txn := New().Txn()
			txn.TrackMutate(true)
			for i, k := range c.before {
				txn.Insert([]byte(k), i)
			}
			ch, _, ok := txn.GetWatch([]byte(c.watch))
			if ok {
				t.Fatalf("%q found before it was inserted", c.watch)
			}
			txn.Insert([]byte(c.watch), 42)
			tree := txn.Commit()
			if v, _ := tree.Get([]byte(c.watch)); v != 42 {
				t.Fatalf("%q = %v", c.watch, v)
			}
			if !isClosed(ch) {
				t.Fatalf("the watch on %q taken before it was inserted is still open after the commit that inserted it", c.watch)
			}
		})
	}
}

// The same with a transaction on a tree that already holds a key: the
// writable-set path, which the fork keeps as upstream had it (passes).
func TestAttackNonEmptyTxnWatchClosedByCommit(t *testing.T) {
	base, _, _ := New().Insert([]byte("zzz"), 0)
	txn := base.Txn()
	txn.TrackMutate(true)
	txn.Insert([]byte("foo1"), 1)
	txn.Insert([]byte("foo2"), 2)
	ch, _, _ := txn.GetWatch([]byte("foo3"))
	txn.Insert([]byte("foo3"), 3)
	txn.Commit()
	if !isClosed(ch) {
		t.Fatal("watch on foo3 still open")
	}
}

// Views a transaction from an empty tree exposed (CommitOnly mid-way, a
// Clone, the empty tree it started from, an iterator) never change as it
// writes on, and watches taken on them close at the final commit.
func TestAttackFromEmptyViewsStayFixed(t *testing.T) {
	empty := New()
	emptyWatch, _, _ := empty.Root().GetWatch([]byte("k"))
	txn := empty.Txn()
	txn.TrackMutate(true)
	for i := range 200 {
		txn.Insert(fmt.Appendf(nil, "k/%03d", i), i)
	}
	mid := txn.CommitOnly()
	midWant := treeKeys(mid)
	midLen := mid.Len()
	it := mid.Root().Iterator()
	it.SeekPrefix([]byte("k/1"))
	leafWatch, _, _ := mid.Root().GetWatch([]byte("k/150"))
	nodeWatch, _, _ := mid.Root().GetWatch([]byte("k/15x"))

	clone := txn.Clone()
	clone.Insert([]byte("k/150"), "clone")
	clone.Delete([]byte("k/001"))

	// The transaction goes on writing: updates, deletes, a prefix delete,
	// splits under the view's nodes.
	txn.Insert([]byte("k/150"), "txn")
	txn.Insert([]byte("k/15x"), "new")
	txn.Delete([]byte("k/002"))
	txn.DeletePrefix([]byte("k/19"))
	txn.Insert([]byte("k/0"), "short")
	final := txn.Commit()
	cl := clone.Commit()

	if got := treeKeys(mid); !slices.Equal(got, midWant) || mid.Len() != midLen {
		t.Fatalf("the mid-transaction view changed: %d keys (Len %d), want %d (Len %d)", len(got), mid.Len(), len(midWant), midLen)
	}
	var wantIter []string
	for _, s := range midWant {
		if len(s) > 3 && s[:3] == "k/1" {
			wantIter = append(wantIter, s)
		}
	}
	if got := iterKeys(it); !slices.Equal(got, wantIter) {
		t.Fatalf("an iterator on the view taken before the writes gave %d keys, want %d", len(got), len(wantIter))
	}
	if empty.Len() != 0 || len(treeKeys(empty)) != 0 {
		t.Fatal("the empty tree the transaction started from changed")
	}
	if v, _ := cl.Get([]byte("k/150")); v != "clone" {
		t.Fatalf("clone k/150 = %v", v)
	}
	if _, ok := cl.Get([]byte("k/002")); !ok {
		t.Fatal("the transaction's delete reached the clone")
	}
	if _, ok := final.Get([]byte("k/001")); !ok {
		t.Fatal("the clone's delete reached the transaction")
	}
	if v, _ := final.Get([]byte("k/150")); v != "txn" {
		t.Fatalf("final k/150 = %v", v)
	}
	if !isClosed(emptyWatch) {
		t.Fatal("a watch on the empty tree is open after the first commit")
	}
	if !isClosed(leafWatch) {
		t.Fatal("a watch on k/150 in the mid-transaction view is open after the commit that rewrote it")
	}
	if !isClosed(nodeWatch) {
		t.Fatal("a watch for k/15x in the mid-transaction view is open after the commit that inserted it")
	}
}

// A random mix of transactions from empty and non-empty trees, each
// exposing views (CommitOnly mid-way, Clone, Commit then writing on,
// Notify twice), on several goroutines at once so pooled maps would be
// shared if one went back while still in use. Every view keeps what it
// held when taken (contents, iteration order, Len), and every watch on a
// key in a view closes once a commit changes that key.
func TestAttackRandomViewsStayFixed(t *testing.T) {
	type view struct {
		tree *Tree
		want []string
		len  int
	}
	type watch struct {
		ch   <-chan struct{}
		key  string
		val  int
		have bool
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			rnd := rand.New(rand.NewSource(int64(g) + 1))
			var views []view
			tree := New()
			model := map[string]int{}
			var watches []*watch
			keyOf := func() string {
				return fmt.Sprintf("%c/%d", 'a'+rnd.Intn(3), rnd.Intn(40))
			}
			snapshotModel := func(m map[string]int) map[string]int {
				c := make(map[string]int, len(m))
				for k, v := range m {
					c[k] = v
				}
				return c
			}
			addView := func(tr *Tree) {
				views = append(views, view{tree: tr, want: treeKeys(tr), len: tr.Len()})
				for range 3 {
					k := keyOf()
					ch, v, ok := tr.Root().GetWatch([]byte(k))
					w := &watch{ch: ch, key: k, have: ok}
					if ok {
						w.val = v.(int)
					}
					watches = append(watches, w)
				}
			}
			for round := range 150 {
				if rnd.Intn(6) == 0 {
					tree, model = New(), map[string]int{}
					watches = nil // not successors of the new tree
				}
				txn := tree.Txn()
				txn.TrackMutate(true)
				m := snapshotModel(model)
				var clones []*Txn
				var cloneModels []map[string]int
				for op := range 40 {
					k := keyOf()
					switch r := rnd.Intn(20); {
					case r < 13:
						v := round*100 + op
						txn.Insert([]byte(k), v)
						m[k] = v
					case r < 17:
						txn.Delete([]byte(k))
						delete(m, k)
					case r == 17:
						// Delete whole subtrees: the watches under them
						// close too (upstream v1.3.1 left them open when
						// the prefix's node was already its own).
						p := k[:3]
						txn.DeletePrefix([]byte(p))
						for mk := range m {
							if len(mk) >= len(p) && mk[:len(p)] == p {
								delete(m, mk)
							}
						}
					case r == 18:
						addView(txn.CommitOnly())
						if rnd.Intn(2) == 0 {
							txn.Notify()
						}
					default:
						c := txn.Clone()
						c.Insert([]byte("clone/"+k), op)
						clones = append(clones, c)
						cm := snapshotModel(m)
						cm["clone/"+k] = op
						cloneModels = append(cloneModels, cm)
					}
				}
				tree = txn.Commit()
				txn.Notify()
				model = m
				for i, c := range clones {
					ct := c.Commit()
					if got, want := treeKeys(ct), modelKeys(cloneModels[i]); !slices.Equal(got, want) {
						t.Errorf("g%d round %d: clone %d holds %v, want %v", g, round, i, got, want)
						return
					}
				}
				if got, want := treeKeys(tree), modelKeys(model); !slices.Equal(got, want) || tree.Len() != len(model) {
					t.Errorf("g%d round %d: tree holds %v (Len %d), want %v", g, round, got, tree.Len(), want)
					return
				}
				addView(tree)
				for _, v := range views {
					if got := treeKeys(v.tree); !slices.Equal(got, v.want) || v.tree.Len() != v.len {
						t.Errorf("g%d round %d: a view changed: %v (Len %d), was %v (Len %d)", g, round, got, v.tree.Len(), v.want, v.len)
						return
					}
				}
				for _, w := range watches {
					v, ok := tree.Get([]byte(w.key))
					changed := ok != w.have || (ok && v.(int) != w.val)
					if changed && !isClosed(w.ch) {
						t.Errorf("g%d round %d: the watch on %s (was %v/%v, now %v/%v) is open", g, round, w.key, w.val, w.have, v, ok)
						return
					}
				}
				// Drop the watches on changed keys (they are closed).
				kept := watches[:0]
				for _, w := range watches {
					v, ok := tree.Get([]byte(w.key))
					if ok == w.have && (!ok || v.(int) == w.val) {
						kept = append(kept, w)
					}
				}
				watches = kept
				if len(views) > 30 {
					views = views[len(views)-30:]
				}
			}
		})
	}
	wg.Wait()
}
