package iradix

// writableSet is the set of nodes a transaction made and never exposed
// outside it: the nodes it may change in place. nil is the empty set.
//
// volhost's change to the fork: upstream bounds this set with an LRU of
// defaultModifiedCache nodes. Every node in the set is also in the
// transaction's new tree, which is kept whole anyway, so the set's size is
// bounded by what the transaction writes; without the bound a transaction
// of more than 8,192 nodes (a snapshot restore, a bulk registration) stops
// copying the paths it had already copied, and a lookup is one map access
// instead of a map access and a list move. A write transaction is reset to
// the empty set by Clone and CommitOnly, as before.
type writableSet map[*Node]struct{}

func (s writableSet) has(n *Node) bool {
	_, ok := s[n]
	return ok
}

// add returns the set with n added (a new set when s is nil).
func (s writableSet) add(n *Node) writableSet {
	if s == nil {
		s = writableSet{}
	}
	s[n] = struct{}{}
	return s
}
