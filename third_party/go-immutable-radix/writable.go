package iradix

// writableSet is the set of nodes a transaction made and never exposed
// outside it: the nodes it may change in place. nil is the empty set.
//
// volhost's second change to the fork: upstream bounds this set with an
// LRU of defaultModifiedCache nodes. Every node in the set is also in the
// transaction's new tree, which is kept whole anyway, so the set's size is
// bounded by what the transaction writes; without the bound a transaction
// of more than 8,192 nodes (a snapshot restore, a bulk registration) stops
// copying the paths it had already copied, and a lookup is one map access
// instead of a map access and a list move. A write transaction is reset to
// the empty set by Clone and CommitOnly, as before.
type writableSet = set[*Node]

// noteWritable adds nc, a node the transaction just made, to its set.
func (t *Txn) noteWritable(nc *Node) {
	if t.writable == nil {
		t.writable = writablePool.get()
	}
	t.writable[nc] = struct{}{}
}

// ownsNode says whether the transaction made n and has not exposed it
// outside itself since, so it may change n in place.
//
// volhost's third change to the fork: a transaction that started from an
// empty tree (a snapshot restore's new database, a table's first rows)
// made every node of its tree but the empty root it started from, which
// is shared with the tree it came from: the set would hold every other
// node. Restoring 1,000,000 volumes kept a set of millions of entries,
// its look-ups a fifth of the restore's inserts (BenchmarkRestore). Such a
// transaction owns every node but that root instead, with no set, until
// it exposes its nodes (CommitOnly, Clone), as the set is emptied then.
// It also owns the nodes insert makes without writeNode (a new leaf, a
// split), which the set never held: they are as much its own.
//
// A node something watches is never its own: a watch taken inside the
// transaction (Txn.GetWatch) on a node it made must be closed by its
// commit, so the node is copied and its channel tracked, as upstream does
// for a node outside its set.
func (t *Txn) ownsNode(n *Node) bool {
	if n.mutateCh.watched() {
		return false
	}
	if t.fromEmpty {
		return n != t.snap
	}
	_, ok := t.writable[n]
	return ok
}

// exposeNodes marks the transaction's nodes as seen outside it (a
// committed tree, a clone): it owns none of them from now on, so its set
// goes back to the pool and a transaction from an empty tree stops owning
// everything.
func (t *Txn) exposeNodes() {
	writablePool.put(t.writable)
	t.writable, t.fromEmpty = nil, false
}

// isEmpty says whether n is the root of an empty tree.
func (n *Node) isEmpty() bool {
	return n.leaf == nil && len(n.edges) == 0 && len(n.prefix) == 0
}
