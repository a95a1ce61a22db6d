package iradix

import "unsafe"

// volhost's sixth change to the fork: a node made for a new leaf, or to
// replace a leaf, is allocated with its leaf, one object instead of two.
// A key's leaf and the node that holds it were two of the objects the
// collector marks for every row of every index: in volhost's state store
// at 100,000 volumes the radix trees made about half the live objects.
// With the pairs a state built through the FSM has a fifth fewer objects
// and a collection of it costs about a tenth less (BENCHMARKS.md "A leaf
// allocated with its node, and the events' last number kept").
//
// A leaf is never copied, since its mutation channel is what a watch on
// it holds. So a node copied without replacing its leaf (a split trims
// its prefix, a child is added under the leaf's key) points into the pair
// it came from, which then stays live until that leaf is replaced. That
// is all it keeps, because a pair's leaf and edges are never changed in
// place, not even by the transaction that made it (writeNode copies it,
// writeLeaf replaces it): its node part keeps the edges it was made with,
// none (a pair is made only for a node without children), and always
// holds the leaf it was made with. Changing them in place would leave the
// pair holding what its tree no longer holds: a cleared leaf's value, or
// the children of a key that is a prefix of other keys, once later writes
// replace them. Only its prefix may change in place, trimmed by a split
// in the transaction that owns it: a slice of its own key either way.

// leafPair is a node and its leaf in one allocation.
type leafPair struct {
	node Node
	leaf leafNode
}

// newLeafNode is a node without children, with prefix, holding a leaf of
// k and v.
func newLeafNode(prefix, k []byte, v interface{}) *Node {
	p := &leafPair{leaf: leafNode{key: k, val: v}}
	p.node.leaf = &p.leaf
	p.node.prefix = prefix
	return &p.node
}

// isPair says whether n was made with its leaf (newLeafNode).
func (n *Node) isPair() bool {
	return n.leaf != nil && uintptr(unsafe.Pointer(n.leaf)) == uintptr(unsafe.Pointer(n))+unsafe.Offsetof(leafPair{}.leaf)
}

// writeLeaf is n with its leaf replaced by one of k, the key whose search
// ended at n, and v. For a node without children that is a new pair, in
// one allocation, with its channels tracked as writeNode would; for one
// with children, writeNode's node and a leaf of its own.
func (t *Txn) writeLeaf(n *Node, k []byte, v interface{}) *Node {
	if len(n.edges) != 0 {
		nc := t.writeNode(n, true)
		nc.leaf = &leafNode{key: k, val: v}
		return nc
	}
	if t.trackMutate {
		if !t.ownsNode(n) {
			t.trackChannel(&n.mutateCh)
		}
		if n.leaf != nil {
			t.trackChannel(&n.leaf.mutateCh)
		}
	}
	// n's prefix is the end of k: k's own bytes, as upstream's copy of it
	// would be, with no copy to make.
	nc := newLeafNode(k[len(k)-len(n.prefix):], k, v)
	if !t.fromEmpty {
		t.noteWritable(nc)
	}
	return nc
}
