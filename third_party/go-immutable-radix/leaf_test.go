package iradix

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"
	"weak"
)

// paired says whether n's leaf was allocated with n (leafPair).
func paired(n *Node) bool {
	return n.leaf != nil && uintptr(unsafe.Pointer(n.leaf)) == uintptr(unsafe.Pointer(n))+unsafe.Offsetof(leafPair{}.leaf)
}

// leafNodes counts the nodes holding a leaf under n, and those paired.
func leafNodes(n *Node) (leaves, pairs int) {
	if n.leaf != nil {
		leaves++
		if paired(n) {
			pairs++
		}
	}
	for _, e := range n.edges {
		l, p := leafNodes(e.node)
		leaves, pairs = leaves+l, pairs+p
	}
	return leaves, pairs
}

// Every leaf that an insert makes, in a transaction from an empty tree
// (a restore) or on a committed tree (a write), is one allocation with
// its node; so is a leaf an update replaces.
func TestLeavesAreAllocatedWithTheirNodes(t *testing.T) {
	keys := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("vol-%05d", i*7%1000))
		}
		return out
	}
	txn := New().Txn()
	for _, k := range keys(0, 1000) {
		txn.Insert([]byte(k), k)
	}
	tree := txn.Commit()
	if l, p := leafNodes(tree.Root()); l != 1000 || p != l {
		t.Fatalf("from an empty tree: %d of %d leaves allocated with their nodes, want all of 1000", p, l)
	}

	txn = tree.Txn()
	for i, k := range keys(0, 500) {
		txn.Insert([]byte(k), i) // updates, every other one of them twice
		if i%2 == 0 {
			txn.Insert([]byte(k), -i)
		}
	}
	for i := range 50 {
		txn.Insert([]byte(fmt.Sprintf("vol-%05d", 1000+i)), i) // new keys, some splitting a leaf's prefix
	}
	tree = txn.Commit()
	updated := 0
	tree.Root().Walk(func(k []byte, v interface{}) bool {
		if _, ok := v.(int); ok {
			updated++
		}
		return false
	})
	if updated != 550 {
		t.Fatalf("%d keys hold the values written, want 550", updated)
	}
	l, p := leafNodes(tree.Root())
	// A split copies the node of the leaf it splits and keeps the leaf
	// (its identity is what a watch holds): those alone are unpaired.
	if l != 1050 || p < l-50 {
		t.Fatalf("after the updates: %d of %d leaves allocated with their nodes, want all but the splits' (at most 50)", p, l)
	}
}

// A value replaced, in a transaction or by a later one, is not kept live
// by the pair it was written in: an update makes a new pair, never a new
// leaf in the old pair's node.
func TestReplacedValuesAreNotKeptByTheirPairs(t *testing.T) {
	type value struct{ _ [64]byte }
	tree := New()
	for i := range 100 {
		tree, _, _ = tree.Insert([]byte(fmt.Sprintf("k%03d", i)), &value{})
	}
	var gone []weak.Pointer[value]
	write := func(txn *Txn, k string) {
		v := &value{}
		gone = append(gone, weak.Make(v))
		txn.Insert([]byte(k), v)
	}
	txn := tree.Txn()
	write(txn, "k007")
	write(txn, "k007") // replaces the pair the transaction just made
	write(txn, "k200") // a new key
	write(txn, "k200")
	tree = txn.Commit()
	check := func(when string, replaced []weak.Pointer[value]) {
		t.Helper()
		runtime.GC()
		for i, w := range replaced {
			if w.Value() != nil {
				t.Fatalf("%s: replaced value %d is still live", when, i)
			}
		}
	}
	check("replaced in the transaction that wrote it", []weak.Pointer[value]{gone[0], gone[2]})
	txn = tree.Txn()
	txn.TrackMutate(true)
	txn.Insert([]byte("k007"), &value{})
	txn.Insert([]byte("k200"), &value{})
	tree = txn.Commit()
	check("replaced by a later transaction", gone)
	runtime.KeepAlive(tree)
}

// A watch taken on a leaf before a split copies the leaf's node is closed
// when that leaf is later replaced: the split kept the leaf itself.
func TestWatchOnALeafSurvivesASplitOfItsNode(t *testing.T) {
	tree, _, _ := New().Insert([]byte("volume-a"), 1)
	tree, _, _ = tree.Insert([]byte("zed"), 0)
	watch, _, ok := tree.Root().GetWatch([]byte("volume-a"))
	if !ok {
		t.Fatal("volume-a not found")
	}
	txn := tree.Txn()
	txn.TrackMutate(true)
	txn.Insert([]byte("volume-b"), 2) // splits volume-a's node
	tree = txn.Commit()
	if isClosed(watch) {
		t.Fatal("the split closed volume-a's watch; its leaf did not change")
	}
	txn = tree.Txn()
	txn.TrackMutate(true)
	txn.Insert([]byte("volume-a"), 3)
	txn.Commit()
	if !isClosed(watch) {
		t.Fatal("volume-a replaced after a split of its node: its watch is still open")
	}
}
