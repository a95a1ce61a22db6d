package iradix

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"weak"
)

// Tests of the fork's sixth change (leaf.go), written by a helper to
// attack it: a node and its leaf allocated together (leafPair), never
// changed in place but for a split's prefix. They judge only through the
// public API (values, iteration, Len, watches) and the reachability of
// values (weak pointers after a collection); each passes on upstream
// go-immutable-radix v1.3.1's semantics. Against the change's first form
// they found a deleted value kept by its pair's leaf half, the children a
// copied pair's node half still pointed to, and copies that shared an
// earlier caller's key buffer as their prefix.

// alVal is a value whose reachability the tests check: big enough that
// the allocator never batches it with another object.
type alVal struct {
	id int
	_  [56]byte
}

// alValues makes values and remembers a weak pointer to each.
type alValues struct {
	weak map[int]weak.Pointer[alVal]
	next int
}

func newALValues() *alValues { return &alValues{weak: map[int]weak.Pointer[alVal]{}} }

//go:noinline
func (a *alValues) make() *alVal {
	a.next++
	v := &alVal{id: a.next}
	a.weak[v.id] = weak.Make(v)
	return v
}

// heldIDs is the ids of the values the trees hold.
func heldIDs(trees ...*Tree) map[int]bool {
	held := map[int]bool{}
	for _, tr := range trees {
		tr.Root().Walk(func(k []byte, v interface{}) bool {
			if av, ok := v.(*alVal); ok {
				held[av.id] = true
			}
			return false
		})
	}
	return held
}

// leaked is the ids of the values still live that none of trees holds
// (sorted), after two collections.
func (a *alValues) leaked(trees ...*Tree) []int {
	held := heldIDs(trees...)
	runtime.GC()
	runtime.GC()
	var out []int
	for id, w := range a.weak {
		if held[id] {
			continue
		}
		if w.Value() != nil {
			out = append(out, id)
		}
	}
	sort.Ints(out)
	return out
}

// ---------------------------------------------------------------------
// Targeted: values a tree no longer holds must not stay reachable from it.
// ---------------------------------------------------------------------

// alBuild inserts keys in one transaction from an empty tree (the
// "restore" path: every node the transaction makes is its own and is
// changed in place) with values from vals, and returns the tree and the
// value ids by key.
func alBuild(vals *alValues, keys ...string) (*Tree, map[string]int) {
	ids := map[string]int{}
	txn := New().Txn()
	for _, k := range keys {
		v := vals.make()
		ids[k] = v.id
		txn.Insert([]byte(k), v)
	}
	return txn.Commit(), ids
}

// alBuildOneByOne inserts keys one committed transaction each.
func alBuildOneByOne(vals *alValues, keys ...string) (*Tree, map[string]int) {
	ids := map[string]int{}
	tree := New()
	for _, k := range keys {
		v := vals.make()
		ids[k] = v.id
		tree, _, _ = tree.Insert([]byte(k), v)
	}
	return tree, ids
}

func alExpectNoLeak(t *testing.T, vals *alValues, tree *Tree, what string) {
	t.Helper()
	if l := vals.leaked(tree); len(l) != 0 {
		t.Fatalf("%s: %d value(s) the tree no longer holds are still reachable (ids %v); the tree holds %v", what, len(l), l, treeKeysAL(tree))
	}
	runtime.KeepAlive(tree)
}

func treeKeysAL(t *Tree) []string {
	var out []string
	t.Root().Walk(func(k []byte, v interface{}) bool {
		if av, ok := v.(*alVal); ok {
			out = append(out, fmt.Sprintf("%q=#%d", k, av.id))
		} else {
			out = append(out, fmt.Sprintf("%q=%v", k, v))
		}
		return false
	})
	return out
}

// Deleting a key whose node the transaction owns (a transaction from an
// empty tree owns every node it made) and that keeps children: the node
// stays in the tree with no leaf, merged or not. Its pair's leaf half
// must not keep the deleted value.
func TestDeletedKeyOfAnOwnedNodeKeepsNoValue(t *testing.T) {
	cases := []struct {
		name string
		keys []string
		del  string
	}{
		{"two children (no merge)", []string{"a", "ab", "ac"}, "a"},
		{"one child (merge)", []string{"a", "ab"}, "a"},
		{"deeper, one child (merge)", []string{"x", "xa", "xab", "xabc"}, "xa"},
		{"empty key at the root", []string{"", "x", "y"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vals := newALValues()
			tree := func() *Tree {
				txn := New().Txn()
				for _, k := range c.keys {
					txn.Insert([]byte(k), vals.make())
				}
				if _, ok := txn.Delete([]byte(c.del)); !ok {
					t.Fatalf("Delete(%q) found nothing", c.del)
				}
				return txn.Commit()
			}()
			if tree.Len() != len(c.keys)-1 {
				t.Fatalf("Len %d", tree.Len())
			}
			alExpectNoLeak(t, vals, tree, fmt.Sprintf("Delete(%q) in the transaction from empty that inserted %q", c.del, c.keys))
		})
	}
}

// The same in a transaction on a committed tree: a key rewritten (a new
// pair the transaction owns), then deleted in the same transaction.
func TestKeyWrittenThenDeletedInOneTxnKeepsNoValue(t *testing.T) {
	cases := []struct {
		name string
		keys []string
		key  string
	}{
		{"two children (no merge)", []string{"a", "ab", "ac"}, "a"},
		{"one child (merge)", []string{"a", "ab", "zz"}, "a"},
		{"empty key at the root", []string{"", "x", "y"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vals := newALValues()
			base, _ := alBuildOneByOne(vals, c.keys...)
			tree := func() *Tree {
				txn := base.Txn()
				txn.TrackMutate(true)
				txn.Insert([]byte(c.key), vals.make()) // a new pair, owned
				txn.Insert([]byte(c.key), vals.make()) // and another
				txn.Delete([]byte(c.key))
				return txn.Commit()
			}()
			base = nil
			alExpectNoLeak(t, vals, tree, fmt.Sprintf("%q written twice then deleted in one transaction on %q", c.key, c.keys))
		})
	}
}

// DeletePrefix("") empties the root in place when the transaction owns
// it: the root made for the empty key must not keep its value.
func TestDeletePrefixOfAnOwnedRootKeepsNoValue(t *testing.T) {
	vals := newALValues()
	tree := func() *Tree {
		txn := New().Txn()
		txn.Insert([]byte(""), vals.make())
		txn.Insert([]byte("a"), vals.make())
		txn.DeletePrefix([]byte(""))
		return txn.Commit()
	}()
	if tree.Len() != 0 {
		t.Fatalf("Len %d", tree.Len())
	}
	alExpectNoLeak(t, vals, tree, "DeletePrefix(\"\") after inserting \"\" and \"a\" from empty")
}

// A node copied without replacing its leaf keeps pointing into the pair
// it was copied from; the pair's node half keeps the edges it had. Once
// the children change, the old children (and their values) must not stay
// reachable through that pair.
func TestCopiedLeafNodeKeepsNoReplacedChildren(t *testing.T) {
	t.Run("child updated after a restore", func(t *testing.T) {
		vals := newALValues()
		tree, _ := alBuild(vals, "a", "ab")
		tree, _, _ = tree.Insert([]byte("ab"), vals.make())
		alExpectNoLeak(t, vals, tree, "\"ab\" updated on a tree restored with \"a\", \"ab\"")
	})
	t.Run("child updated after its parent's leaf was rewritten", func(t *testing.T) {
		vals := newALValues()
		tree, _ := alBuildOneByOne(vals, "a", "ab")
		tree, _, _ = tree.Insert([]byte("a"), vals.make())  // a pair with ab's edge
		tree, _, _ = tree.Insert([]byte("ab"), vals.make()) // copies it
		alExpectNoLeak(t, vals, tree, "\"a\" then \"ab\" updated in two transactions")
	})
	t.Run("child deleted", func(t *testing.T) {
		vals := newALValues()
		tree, _ := alBuild(vals, "a", "ab", "ac")
		tree, _, _ = tree.Delete([]byte("ab"))
		alExpectNoLeak(t, vals, tree, "\"ab\" deleted on a tree restored with \"a\", \"ab\", \"ac\"")
	})
	t.Run("subtree deleted by prefix", func(t *testing.T) {
		vals := newALValues()
		keys := []string{"vol"}
		for i := range 100 {
			keys = append(keys, fmt.Sprintf("vol/%03d", i))
		}
		tree, _ := alBuild(vals, keys...)
		tree, _ = tree.DeletePrefix([]byte("vol/"))
		if tree.Len() != 1 {
			t.Fatalf("Len %d", tree.Len())
		}
		alExpectNoLeak(t, vals, tree, "DeletePrefix(\"vol/\") on a tree restored with vol and vol/000..vol/099")
	})
	t.Run("after a merge", func(t *testing.T) {
		vals := newALValues()
		tree, _ := alBuild(vals, "pa", "pb", "pbc")
		tree, _, _ = tree.Delete([]byte("pa"))               // merges "p" with "b"
		tree, _, _ = tree.Insert([]byte("pbc"), vals.make()) // copies the merged node
		alExpectNoLeak(t, vals, tree, "\"pa\" deleted (merge), then \"pbc\" updated")
	})
	t.Run("after a split", func(t *testing.T) {
		vals := newALValues()
		tree, _ := alBuild(vals, "abc", "abcd")
		tree, _, _ = tree.Insert([]byte("abx"), vals.make())  // splits abc's node
		tree, _, _ = tree.Insert([]byte("abcd"), vals.make()) // copies it again
		alExpectNoLeak(t, vals, tree, "split of \"abc\", then \"abcd\" updated")
	})
}

// Values written and replaced in one transaction, on an empty tree and a
// committed one, with and without mutation tracking.
func TestValuesReplacedInOneTxnAreNotKept(t *testing.T) {
	for _, fromEmpty := range []bool{true, false} {
		for _, track := range []bool{false, true} {
			t.Run(fmt.Sprintf("fromEmpty=%v/track=%v", fromEmpty, track), func(t *testing.T) {
				vals := newALValues()
				base := New()
				if !fromEmpty {
					base, _ = alBuildOneByOne(vals, "k", "k/1", "k/2", "q")
				}
				tree := func() *Tree {
					txn := base.Txn()
					txn.TrackMutate(track)
					for range 3 {
						for _, k := range []string{"", "k", "k/1", "k/2", "k/1/x", "kz", "q"} {
							txn.Insert([]byte(k), vals.make())
						}
					}
					return txn.Commit()
				}()
				base = nil
				alExpectNoLeak(t, vals, tree, "every key written three times in one transaction")
			})
		}
	}
}

// ---------------------------------------------------------------------
// Randomized: a Go map as the model.
// ---------------------------------------------------------------------

// alKey draws keys from a small alphabet so that many are prefixes of
// others, the empty key among them.
func alKey(rnd *rand.Rand) string {
	if rnd.Intn(12) == 0 {
		return fmt.Sprintf("long/%c/%d", 'a'+rnd.Intn(3), rnd.Intn(30))
	}
	n := rnd.Intn(6)
	b := make([]byte, n)
	for i := range b {
		b[i] = "abc"[rnd.Intn(3)]
	}
	return string(b)
}

type alModel map[string]int // key -> value id

func (m alModel) sortedKeys() []string { return slices.Sorted(maps.Keys(m)) }

func valID(v interface{}) int {
	if av, ok := v.(*alVal); ok {
		return av.id
	}
	return -1
}

// alCheckTree compares tree with model through the public read API.
func alCheckTree(t *testing.T, rnd *rand.Rand, tree *Tree, m alModel, what string) bool {
	t.Helper()
	fail := func(format string, args ...interface{}) bool {
		t.Errorf("%s: %s", what, fmt.Sprintf(format, args...))
		return false
	}
	keys := m.sortedKeys()
	if tree.Len() != len(m) {
		return fail("Len %d, model %d", tree.Len(), len(m))
	}
	var walked []string
	tree.Root().Walk(func(k []byte, v interface{}) bool {
		walked = append(walked, fmt.Sprintf("%s=%d", k, valID(v)))
		return false
	})
	var want []string
	for _, k := range keys {
		want = append(want, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if !slices.Equal(walked, want) {
		return fail("Walk %v, model %v", walked, want)
	}
	// Forward and reverse iteration.
	var fw, bw []string
	it := tree.Root().Iterator()
	for k, v, ok := it.Next(); ok; k, v, ok = it.Next() {
		fw = append(fw, fmt.Sprintf("%s=%d", k, valID(v)))
	}
	ri := tree.Root().ReverseIterator()
	for k, v, ok := ri.Previous(); ok; k, v, ok = ri.Previous() {
		bw = append(bw, fmt.Sprintf("%s=%d", k, valID(v)))
	}
	slices.Reverse(bw)
	if !slices.Equal(fw, want) || !slices.Equal(bw, want) {
		return fail("Iterator %v / ReverseIterator %v, model %v", fw, bw, want)
	}
	// Min and max.
	if len(keys) > 0 {
		k, v, ok := tree.Root().Minimum()
		if !ok || string(k) != keys[0] || valID(v) != m[keys[0]] {
			return fail("Minimum %q=%d, want %q", k, valID(v), keys[0])
		}
		k, v, ok = tree.Root().Maximum()
		if !ok || string(k) != keys[len(keys)-1] || valID(v) != m[keys[len(keys)-1]] {
			return fail("Maximum %q=%d, want %q", k, valID(v), keys[len(keys)-1])
		}
	}
	for range 6 {
		q := alKey(rnd)
		// Get.
		v, ok := tree.Get([]byte(q))
		mv, mok := m[q]
		if ok != mok || (ok && valID(v) != mv) {
			return fail("Get(%q) = %d,%v, model %d,%v", q, valID(v), ok, mv, mok)
		}
		// LongestPrefix.
		var lpk string
		lpok := false
		for i := len(q); i >= 0; i-- {
			if _, ok := m[q[:i]]; ok {
				lpk, lpok = q[:i], true
				break
			}
		}
		k, v, ok := tree.Root().LongestPrefix([]byte(q))
		if ok != lpok || (ok && (string(k) != lpk || valID(v) != m[lpk])) {
			return fail("LongestPrefix(%q) = %q,%v, model %q,%v", q, k, ok, lpk, lpok)
		}
		// SeekPrefix.
		p := q
		if len(p) > 0 && rnd.Intn(2) == 0 {
			p = p[:rnd.Intn(len(p))]
		}
		var got, exp []string
		it := tree.Root().Iterator()
		it.SeekPrefix([]byte(p))
		for k, _, ok := it.Next(); ok; k, _, ok = it.Next() {
			got = append(got, string(k))
		}
		for _, k := range keys {
			if strings.HasPrefix(k, p) {
				exp = append(exp, k)
			}
		}
		if !slices.Equal(got, exp) {
			return fail("SeekPrefix(%q) %q, model %q", p, got, exp)
		}
		// SeekLowerBound.
		got, exp = nil, nil
		it = tree.Root().Iterator()
		it.SeekLowerBound([]byte(q))
		for k, _, ok := it.Next(); ok; k, _, ok = it.Next() {
			got = append(got, string(k))
		}
		for _, k := range keys {
			if k >= q {
				exp = append(exp, k)
			}
		}
		if !slices.Equal(got, exp) {
			return fail("SeekLowerBound(%q) %q, model %q", q, got, exp)
		}
		// SeekReverseLowerBound.
		got, exp = nil, nil
		ri := tree.Root().ReverseIterator()
		ri.SeekReverseLowerBound([]byte(q))
		for k, _, ok := ri.Previous(); ok; k, _, ok = ri.Previous() {
			got = append(got, string(k))
		}
		for i := len(keys) - 1; i >= 0; i-- {
			if keys[i] <= q {
				exp = append(exp, keys[i])
			}
		}
		if !slices.Equal(got, exp) {
			return fail("SeekReverseLowerBound(%q) %q, model %q", q, got, exp)
		}
	}
	return true
}

// alWatch is a watch taken on a key, with what the key held then.
type alWatch struct {
	ch      <-chan struct{}
	key     string
	id      int  // value id, 0 if absent
	written bool // (in-transaction watches) the key was written after
}

// alTxnOps applies n random operations to txn and the model m, recording
// the keys whose leaf it replaced or removed in touched (a key written,
// a present key deleted, present keys under a deleted prefix).
func alTxnOps(rnd *rand.Rand, vals *alValues, txn *Txn, m alModel, n int, touched map[string]bool, inTxnWatches *[]*alWatch) {
	touch := func(k string) {
		touched[k] = true
		if inTxnWatches != nil {
			for _, w := range *inTxnWatches {
				if w.key == k {
					w.written = true
				}
			}
		}
	}
	for range n {
		k := alKey(rnd)
		switch r := rnd.Intn(20); {
		case r < 11:
			v := vals.make()
			old, ok := txn.Insert([]byte(k), v)
			mv, mok := m[k]
			if ok != mok || (ok && valID(old) != mv) {
				panic(fmt.Sprintf("Insert(%q) answered %d,%v, model %d,%v", k, valID(old), ok, mv, mok))
			}
			m[k] = v.id
			touch(k)
		case r < 16:
			old, ok := txn.Delete([]byte(k))
			mv, mok := m[k]
			if ok != mok || (ok && valID(old) != mv) {
				panic(fmt.Sprintf("Delete(%q) answered %d,%v, model %d,%v", k, valID(old), ok, mv, mok))
			}
			if mok {
				touch(k)
				delete(m, k)
			}
		case r < 18:
			p := k
			if len(p) > 0 {
				p = p[:rnd.Intn(len(p)+1)]
			}
			if p == "" && rnd.Intn(4) != 0 {
				p = "b" // the whole tree only now and then
			}
			any := false
			for mk := range m {
				if strings.HasPrefix(mk, p) {
					any = true
					touch(mk)
					delete(m, mk)
				}
			}
			if got := txn.DeletePrefix([]byte(p)); got != any && any {
				panic(fmt.Sprintf("DeletePrefix(%q) = %v, model had keys under it", p, got))
			}
		default:
			if inTxnWatches == nil {
				continue
			}
			// A watch inside the transaction on a key it holds now.
			ch, v, ok := txn.GetWatch([]byte(k))
			mv, mok := m[k]
			if ok != mok || (ok && valID(v) != mv) {
				panic(fmt.Sprintf("Txn.GetWatch(%q) = %d,%v, model %d,%v", k, valID(v), ok, mv, mok))
			}
			if ok {
				*inTxnWatches = append(*inTxnWatches, &alWatch{ch: ch, key: k, id: mv})
			}
		}
	}
}

// Snapshots of committed trees never change, whatever later transactions
// (from empty or not, small or large, clones) do; watches close exactly
// when the key they watch is replaced or deleted.
func TestRandomTxnsAgreeWithAMapModel(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { alRandomModel(t, seed, 120) })
	}
}

func alRandomModel(t *testing.T, seed int64, rounds int) {
	rnd := rand.New(rand.NewSource(seed))
	vals := newALValues()
	type snap struct {
		tree  *Tree
		model alModel
		round int
	}
	var snaps []snap
	var watches []*alWatch
	tree := New()
	model := alModel{}
	takeWatches := func(tr *Tree, m alModel) {
		for range 4 {
			k := alKey(rnd)
			ch, v, ok := tr.Root().GetWatch([]byte(k))
			mv, mok := m[k]
			if ok != mok || (ok && valID(v) != mv) {
				t.Fatalf("GetWatch(%q) = %d,%v, model %d,%v", k, valID(v), ok, mv, mok)
			}
			watches = append(watches, &alWatch{ch: ch, key: k, id: mv})
		}
	}
	takeWatches(tree, model)
	for round := range rounds {
		if rnd.Intn(10) == 0 {
			// Start again from an empty tree: the old trees stay as
			// snapshots, their watches are no longer followed.
			tree, model, watches = New(), alModel{}, nil
			takeWatches(tree, model)
		}
		txn := tree.Txn()
		txn.TrackMutate(true)
		m := maps.Clone(model)
		touched := map[string]bool{}
		nops := []int{1, 3, 10, 40}[rnd.Intn(4)]
		var inTxn []*alWatch
		alTxnOps(rnd, vals, txn, m, nops, touched, &inTxn)
		// Sometimes a clone, written on and committed on its own.
		var clone *Txn
		var cloneModel alModel
		if rnd.Intn(4) == 0 {
			clone = txn.Clone()
			cloneModel = maps.Clone(m)
			alTxnOps(rnd, vals, clone, cloneModel, 5, map[string]bool{}, nil)
			// The original goes on after the clone: touched from here on
			// counts only for in-transaction watches taken before.
		}
		alTxnOps(rnd, vals, txn, m, nops, touched, &inTxn)
		if rnd.Intn(3) == 0 {
			tree = txn.CommitOnly()
			txn.Notify()
		} else {
			tree = txn.Commit()
		}
		model = m
		what := fmt.Sprintf("seed %d round %d", seed, round)
		if !alCheckTree(t, rnd, tree, model, what+": the new tree") {
			return
		}
		if clone != nil {
			ct := clone.Commit()
			if !alCheckTree(t, rnd, ct, cloneModel, what+": the clone") {
				return
			}
			snaps = append(snaps, snap{ct, cloneModel, round})
		}
		// Watches taken before the transaction.
		kept := watches[:0]
		for _, w := range watches {
			cur, present := model[w.key]
			closed := isClosed(w.ch)
			switch {
			case w.id != 0 && touched[w.key] && !closed:
				t.Errorf("%s: the watch on %q (#%d) is open after a commit that replaced or deleted it (now #%d, %v)", what, w.key, w.id, cur, present)
				return
			case w.id != 0 && !touched[w.key] && closed:
				t.Errorf("%s: the watch on %q (#%d) closed though nothing replaced it", what, w.key, w.id)
				return
			case w.id == 0 && present && !closed:
				t.Errorf("%s: the watch for absent %q is open after a commit that inserted it (#%d)", what, w.key, cur)
				return
			}
			if !closed {
				kept = append(kept, w)
			}
		}
		watches = kept
		// Watches taken inside the transaction (on keys it held then).
		for _, w := range inTxn {
			if closed := isClosed(w.ch); closed != w.written {
				t.Errorf("%s: the in-transaction watch on %q (#%d): written after it %v, closed %v", what, w.key, w.id, w.written, closed)
				return
			}
		}
		snaps = append(snaps, snap{tree, maps.Clone(model), round})
		takeWatches(tree, model)
		// Every snapshot still holds what it held.
		for _, s := range snaps {
			if !alCheckTree(t, rnd, s.tree, s.model, fmt.Sprintf("%s: the snapshot of round %d", what, s.round)) {
				return
			}
		}
		if len(snaps) > 25 {
			snaps = snaps[len(snaps)-25:]
		}
	}
}

// Random transactions keeping only the newest tree: after each, no value
// it does not hold is reachable (weak pointers, after a collection).
func TestRandomTxnsKeepNoValueTheTreeLost(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewSource(seed))
			vals := newALValues()
			tree := New()
			model := alModel{}
			var log []string
			for round := range 60 {
				fromEmpty := rnd.Intn(8) == 0
				if fromEmpty {
					tree, model = New(), alModel{}
				}
				track := rnd.Intn(2) == 0
				nops := []int{1, 5, 30}[rnd.Intn(3)]
				func() {
					txn := tree.Txn()
					txn.TrackMutate(track)
					alTxnOps(rnd, vals, txn, model, nops, map[string]bool{}, nil)
					tree = txn.Commit()
				}()
				log = append(log, fmt.Sprintf("round %d: fromEmpty=%v track=%v ops=%d", round, fromEmpty, track, nops))
				if l := vals.leaked(tree); len(l) != 0 {
					t.Fatalf("seed %d after round %d (%s): %d value(s) the tree does not hold are reachable (ids %v)", seed, round, log[len(log)-1], len(l), l)
				}
			}
			runtime.KeepAlive(tree)
		})
	}
}

// ---------------------------------------------------------------------
// Watches through splits, merges and copies; both notify paths.
// ---------------------------------------------------------------------

// A watch on a key survives the split, merge and copies of its node by
// transactions that leave the key alone, and closes when the key is
// replaced (or deleted); a watch on a key nothing replaces stays open.
func TestWatchOnAKeySurvivesSplitsMergesAndCopies(t *testing.T) {
	for _, final := range []string{"replace", "delete", "deletePrefix"} {
		t.Run(final, func(t *testing.T) {
			base, _, _ := New().Insert([]byte("volume-a"), 1)
			base, _, _ = base.Insert([]byte("volume-a/x"), 1)
			watch, _, ok := base.Root().GetWatch([]byte("volume-a"))
			other, _, _ := base.Root().GetWatch([]byte("volume-a/x"))
			if !ok {
				t.Fatal("volume-a not found")
			}
			tree := base
			steps := []func(*Txn){
				func(x *Txn) { x.Insert([]byte("volume-b"), 2) },     // split above
				func(x *Txn) { x.Insert([]byte("volume-a/y"), 3) },   // copy (new edge)
				func(x *Txn) { x.Insert([]byte("volume-a/x"), 4) },   // child rewritten
				func(x *Txn) { x.Delete([]byte("volume-b")) },        // merge above
				func(x *Txn) { x.Insert([]byte("volume"), 5) },       // split again
				func(x *Txn) { x.DeletePrefix([]byte("volume-a/")) }, // children gone
				func(x *Txn) { x.Insert([]byte(""), 6) },             // root leaf
			}
			for i, step := range steps {
				txn := tree.Txn()
				txn.TrackMutate(true)
				step(txn)
				tree = txn.Commit()
				if isClosed(watch) {
					t.Fatalf("step %d closed the watch on volume-a, which it did not write", i)
				}
			}
			if !isClosed(other) {
				t.Fatal("the watch on volume-a/x is open after it was rewritten")
			}
			txn := tree.Txn()
			txn.TrackMutate(true)
			switch final {
			case "replace":
				txn.Insert([]byte("volume-a"), 9)
			case "delete":
				txn.Delete([]byte("volume-a"))
			case "deletePrefix":
				txn.DeletePrefix([]byte("volume-"))
			}
			txn.Commit()
			if !isClosed(watch) {
				t.Fatalf("volume-a %sd after splits, merges and copies of its node: its watch is still open", final)
			}
		})
	}
}

// A transaction of more than 8,192 changed nodes, on both notify paths
// (bothNotifyPaths): tracked, or past the tracking bound, where the commit
// compares the trees, so a key's leaf must be replaced exactly when the
// key is written. Watches on half the keys, another half rewritten, over a
// tree whose nodes earlier transactions split, merged and rewrote.
func TestWatchesClosedExactlyOnBothNotifyPaths(t *testing.T) {
	bothNotifyPaths(t, watchesClosedExactly)
}

func watchesClosedExactly(t *testing.T, overflow bool) {
	const n = 6000
	key := func(i int) []byte { return fmt.Appendf(nil, "k/%d", i) }
	for _, fromEmpty := range []bool{true, false} {
		t.Run(fmt.Sprintf("restored=%v", fromEmpty), func(t *testing.T) {
			var tree *Tree
			if fromEmpty {
				txn := New().Txn()
				for i := range n {
					txn.Insert(key(i), i)
				}
				tree = txn.Commit()
			} else {
				tree = New()
				for i := 0; i < n; i += 500 {
					txn := tree.Txn()
					for j := i; j < i+500; j++ {
						txn.Insert(key(j), j)
					}
					tree = txn.Commit()
				}
			}
			// Earlier writes: rewrite every 7th key twice, in one txn.
			txn := tree.Txn()
			for i := 0; i < n; i += 7 {
				txn.Insert(key(i), -i)
				txn.Insert(key(i), i)
			}
			tree = txn.Commit()
			watches := make([]<-chan struct{}, n)
			for i := range n {
				ch, v, ok := tree.Root().GetWatch(key(i))
				if !ok || v != i {
					t.Fatalf("k/%d = %v,%v", i, v, ok)
				}
				watches[i] = ch
			}
			missing, _, _ := tree.Root().GetWatch([]byte("k/99999"))
			// Rewrite the even keys and delete the odd ones with i%5==0:
			// well over 8192 channels.
			txn = tree.Txn()
			txn.TrackMutate(true)
			for i := range n {
				switch {
				case i%2 == 0:
					txn.Insert(key(i), i+1)
					txn.Insert(key(i), i+2)
				case i%5 == 0:
					txn.Delete(key(i))
				}
			}
			txn.Insert([]byte("k/99999"), 1)
			if txn.trackOverflow != overflow {
				t.Fatalf("overflow = %v, want %v: the test does not test its path", txn.trackOverflow, overflow)
			}
			tree2 := txn.Commit()
			for i := range n {
				written := i%2 == 0 || i%5 == 0
				if got := isClosed(watches[i]); got != written {
					t.Fatalf("k/%d written=%v, its watch closed=%v", i, written, got)
				}
			}
			if !isClosed(missing) {
				t.Fatal("the watch for k/99999 is open after it was inserted")
			}
			for i := range n {
				v, ok := tree.Get(key(i))
				if !ok || v != i {
					t.Fatalf("the tree before: k/%d = %v,%v", i, v, ok)
				}
			}
			want := n + 1
			for i := range n {
				if i%2 == 1 && i%5 == 0 {
					want--
				}
			}
			if tree2.Len() != want || len(treeKeys(tree2)) != want {
				t.Fatalf("Len %d, walked %d, want %d", tree2.Len(), len(treeKeys(tree2)), want)
			}
		})
	}
}

// A large random transaction over a random tree, on both notify paths,
// then the watch and snapshot rules of the model test.
func TestRandomLargeTxnsCloseExactlyTheirWatches(t *testing.T) {
	bothNotifyPaths(t, randomLargeTxnsCloseExactlyTheirWatches)
}

func randomLargeTxnsCloseExactlyTheirWatches(t *testing.T, overflow bool) {
	rnd := rand.New(rand.NewSource(7))
	vals := newALValues()
	key := func() string { return fmt.Sprintf("%c%d/%d", 'a'+rnd.Intn(4), rnd.Intn(40), rnd.Intn(60)) }
	tree := New()
	model := alModel{}
	for round := range 3 {
		// Build up the tree.
		txn := tree.Txn()
		for range 4000 {
			k := key()
			v := vals.make()
			txn.Insert([]byte(k), v)
			model[k] = v.id
		}
		tree = txn.Commit()
		before := tree
		beforeModel := maps.Clone(model)
		type w struct {
			ch  <-chan struct{}
			key string
			id  int
		}
		var ws []w
		for k, id := range model {
			ch, _, _ := tree.Root().GetWatch([]byte(k))
			ws = append(ws, w{ch, k, id})
		}
		txn = tree.Txn()
		txn.TrackMutate(true)
		touched := map[string]bool{}
		for range 9000 {
			k := key()
			switch rnd.Intn(10) {
			case 0, 1, 2, 3, 4, 5:
				v := vals.make()
				txn.Insert([]byte(k), v)
				model[k] = v.id
				touched[k] = true
			case 6, 7, 8:
				if _, ok := model[k]; ok {
					touched[k] = true
				}
				txn.Delete([]byte(k))
				delete(model, k)
			default:
				p := k[:2+rnd.Intn(2)]
				for mk := range model {
					if strings.HasPrefix(mk, p) {
						touched[mk] = true
						delete(model, mk)
					}
				}
				txn.DeletePrefix([]byte(p))
			}
		}
		if txn.trackOverflow != overflow {
			t.Fatalf("overflow = %v, want %v", txn.trackOverflow, overflow)
		}
		tree = txn.Commit()
		for _, x := range ws {
			if got := isClosed(x.ch); got != touched[x.key] {
				t.Fatalf("round %d: %q touched=%v, its watch closed=%v", round, x.key, touched[x.key], got)
			}
		}
		if !alCheckTree(t, rnd, tree, model, fmt.Sprintf("round %d: after", round)) {
			return
		}
		if !alCheckTree(t, rnd, before, beforeModel, fmt.Sprintf("round %d: before", round)) {
			return
		}
	}
}

// ---------------------------------------------------------------------
// Prefix sharing.
// ---------------------------------------------------------------------

// No operation changes the bytes of a caller's key or of a snapshot's
// prefixes: keys that are prefixes of each other, the empty key, merges,
// DeletePrefix; checked by comparing copies of every key passed in and
// every snapshot afterwards.
func TestCallerKeysAreNeverWritten(t *testing.T) {
	rnd := rand.New(rand.NewSource(3))
	type passed struct{ buf, orig []byte }
	var keys []passed
	pass := func(s string) []byte {
		b := []byte(s)
		keys = append(keys, passed{b, []byte(s)})
		return b
	}
	tree := New()
	model := alModel{}
	vals := newALValues()
	var snaps []*Tree
	var snapModels []alModel
	for round := range 200 {
		txn := tree.Txn()
		for range 1 + rnd.Intn(8) {
			k := alKey(rnd)
			switch rnd.Intn(6) {
			case 0, 1, 2:
				v := vals.make()
				txn.Insert(pass(k), v)
				model[k] = v.id
			case 3, 4:
				txn.Delete(pass(k))
				delete(model, k)
			default:
				p := k[:len(k)/2]
				txn.DeletePrefix(pass(p))
				for mk := range model {
					if strings.HasPrefix(mk, p) {
						delete(model, mk)
					}
				}
			}
		}
		tree = txn.Commit()
		for _, p := range keys {
			if !bytes.Equal(p.buf, p.orig) {
				t.Fatalf("round %d: a caller's key %q was changed to %q", round, p.orig, p.buf)
			}
		}
		snaps = append(snaps, tree)
		snapModels = append(snapModels, maps.Clone(model))
		for i, s := range snaps {
			if !alCheckTree(t, rnd, s, snapModels[i], fmt.Sprintf("round %d: snapshot %d", round, i)) {
				return
			}
		}
		if len(snaps) > 20 {
			snaps, snapModels = snaps[1:], snapModels[1:]
		}
	}
}

// A caller that reuses its key buffer after a later transaction rewrote
// the key with a buffer of its own: upstream's copy of the nodes on the
// key's path (writeNode copies their prefixes) left the later tree
// independent of the first buffer; only the first tree, which keeps that
// buffer as its leaf's key and node's prefix, sees the reuse. The fork's
// copies share the prefix, so the later tree's lookups read the reused
// buffer too.
func TestLaterTreesDoNotReadAnEarlierKeyBuffer(t *testing.T) {
	t.Run("key rewritten", func(t *testing.T) {
		buf := []byte("volume-0001")
		t1, _, _ := New().Insert(buf, 1)
		t2, _, _ := t1.Insert([]byte("volume-0001"), 2) // a new buffer
		copy(buf, "XXXXXXXXXXX")                        // the caller reuses its buffer
		if v, ok := t2.Get([]byte("volume-0001")); !ok || v != 2 {
			t.Fatalf("the tree that rewrote volume-0001 with its own buffer answers %v,%v after the first buffer was reused", v, ok)
		}
	})
	t.Run("node split by another key", func(t *testing.T) {
		buf := []byte("volume-0001")
		t1, _, _ := New().Insert(buf, 1)
		t1, _, _ = t1.Insert([]byte("zzz"), 0)
		t2, _, _ := t1.Insert([]byte("volume-0002"), 2) // splits volume-0001's node
		copy(buf, "XXXXXXXXXXX")
		if v, ok := t2.Get([]byte("volume-0002")); !ok || v != 2 {
			t.Fatalf("volume-0002 = %v,%v", v, ok)
		}
		if v, ok := t2.Get([]byte("volume-0001")); !ok || v != 1 {
			t.Fatalf("the tree that split volume-0001's node answers %v,%v for it after the first buffer was reused", v, ok)
		}
	})
	t.Run("child added under it", func(t *testing.T) {
		buf := []byte("volume-0001")
		t1, _, _ := New().Insert(buf, 1)
		t2, _, _ := t1.Insert([]byte("volume-0001/x"), 2) // copies volume-0001's node
		copy(buf, "XXXXXXXXXXX")
		if v, ok := t2.Get([]byte("volume-0001/x")); !ok || v != 2 {
			t.Fatalf("the tree that added volume-0001/x answers %v,%v for it after the first buffer was reused", v, ok)
		}
	})
}
