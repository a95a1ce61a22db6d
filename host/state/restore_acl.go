package state

import "fmt"

// aclTables are the tables that together say who may do what: the
// policies, the tokens and the bootstrap mark. A restore keeps or
// replaces them as one (KeepACLOf), never some of them.
var aclTables = []string{TableACLPolicies, TableACLTokens, TableACLBootstrap}

// KeepACLOf makes a restore keep cur's ACL state (policies, tokens and
// bootstrap mark) when cur has bootstrapped and either the snapshot is
// of the same cluster (sameCluster) or it was saved before the ACL
// bootstrap, and reports whether it did.
//
// Without it, restoring an operator snapshot taken before `acl
// bootstrap` wiped the bootstrap mark with the tokens, and the first
// caller of POST /v1/acl/bootstrap, anyone who reached the port, got a
// management token. Such a snapshot carries no ACL state of its own: a
// restore of data must not open the cluster's door, nor lock its
// operators out by dropping every token while the mark stays.
//
// A snapshot of the same cluster is older than its ACL state: bringing
// its tokens and policies back revived every token deleted since (one
// revoked because it leaked, a node agent's retired with its machine)
// and undid every policy narrowed since, silently, in a restore meant to
// bring data back. Within one cluster the ACL state never goes back
// through a restore. A snapshot of another cluster (a cluster rebuilt
// from a backup, restored with -force-foreign) brings its own ACL state,
// whole: the tokens its agents and operators hold.
//
// The builder's store is what the leader hands raft to install on every
// server, so each replica installs the same ACL state; a raft snapshot
// sent to a follower is the leader's current state and never passes
// here. Call it after the last row was added, before Store.
func (b *Builder) KeepACLOf(cur *Snapshot, sameCluster bool) (bool, error) {
	if !sameCluster {
		if row, err := b.txn.First(TableACLBootstrap, indexID, bootstrapKey); err != nil || row != nil {
			return false, err // another cluster's snapshot brings its own ACL state
		}
	}
	if idx, err := cur.ACLBootstrapIndex(); err != nil || idx == 0 {
		return false, err // nothing to keep: the cluster never bootstrapped either
	}
	for _, t := range aclTables {
		if _, err := b.txn.DeleteAll(t, indexID); err != nil {
			return false, fmt.Errorf("restore: clear %s: %w", t, err)
		}
		it, err := cur.txn.Get(t, indexID)
		if err != nil {
			return false, fmt.Errorf("restore: read %s: %w", t, err)
		}
		for obj := it.Next(); obj != nil; obj = it.Next() {
			// Rows are never changed in place (a write inserts a copy),
			// so the two stores may share them.
			if err := b.txn.Insert(t, obj); err != nil {
				return false, fmt.Errorf("restore: keep %s: %w", t, err)
			}
		}
		// The table's index never goes back: a blocking read of it
		// stays monotonic across the restore.
		curIdx, err := cur.Index(t)
		if err != nil {
			return false, err
		}
		if old, err := b.txn.First(TableIndex, indexID, t); err != nil {
			return false, fmt.Errorf("restore: read index of %s: %w", t, err)
		} else if old != nil && old.(*indexRow).Value >= curIdx {
			continue
		}
		if err := b.txn.Insert(TableIndex, &indexRow{Key: t, Value: curIdx}); err != nil {
			return false, fmt.Errorf("restore: index of %s: %w", t, err)
		}
	}
	return true, nil
}
