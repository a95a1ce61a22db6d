package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// The node claims table holds, for each node with claims, how many: what
// GET /v1/stats's claims by node reads. Counting the claims table's node
// index instead was a walk of every claim on every request, and of every
// write that woke the UI's blocking stats query: 45 ms of the answer at
// 1,000,000 volumes with 100,000 claims in one process, the radix walk's
// cache misses growing faster than the claims (BenchmarkScale, "GET
// /v1/stats's volume counts"). A row changes only when a claim is taken,
// leaves its volume or moves node, the moments the claims table changes,
// and once per node per write, however many of its claims the write moved.
//
// Like the claims table, the rows are derived: not persisted, recounted
// from the claims table on Restore and on import.

// tableNodeClaims holds the nodeClaimsRows (not in persistTables: derived).
const tableNodeClaims = "node_claims"

type nodeClaimsRow struct {
	NodeID string
	Claims int
}

func nodeClaimsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tableNodeClaims, Indexes: map[string]*memdb.IndexSchema{
		indexID: {Name: indexID, Unique: true, Indexer: stringKey("NodeID", func(r *nodeClaimsRow) string { return r.NodeID })},
	}}
}

// noteNodeClaim counts a claim row of node written (+1) or deleted (-1) by
// this write; finishNodeClaims writes the counts.
func (w *writer) noteNodeClaim(node string, sign int) { bump(&w.nodeClaimDelta, node, sign) }

// finishNodeClaims writes the count of every node whose claims this write
// changed, deleting the rows that reach zero.
func (w *writer) finishNodeClaims() error {
	for node, d := range w.nodeClaimDelta {
		if d == 0 {
			continue
		}
		raw, err := w.txn.First(tableNodeClaims, indexID, node)
		if err != nil {
			return fmt.Errorf("read claims of node %s: %w", node, err)
		}
		n := d
		if raw != nil {
			n += raw.(*nodeClaimsRow).Claims
		}
		switch {
		case n < 0:
			return fmt.Errorf("claims of node %s would count %d", node, n)
		case n == 0:
			err = w.txn.Delete(tableNodeClaims, raw)
		default:
			err = w.txn.Insert(tableNodeClaims, &nodeClaimsRow{NodeID: node, Claims: n})
		}
		if err != nil {
			return fmt.Errorf("write claims of node %s: %w", node, err)
		}
	}
	return nil
}

// recountNodeClaims counts the claims table of txn by node from scratch (a
// restore, an import): O(claims), once.
func recountNodeClaims(txn *memdb.Txn) error {
	if _, err := txn.DeleteAll(tableNodeClaims, indexID); err != nil {
		return fmt.Errorf("delete %s rows: %w", tableNodeClaims, err)
	}
	it, err := txn.Get(tableClaims, indexNode)
	if err != nil {
		return fmt.Errorf("read %s: %w", tableClaims, err)
	}
	// In node order a node's rows are adjacent: one row per node.
	flush := func(node string, n int) error {
		if n == 0 {
			return nil
		}
		if err := txn.Insert(tableNodeClaims, &nodeClaimsRow{NodeID: node, Claims: n}); err != nil {
			return fmt.Errorf("write claims of node %s: %w", node, err)
		}
		return nil
	}
	node, n := "", 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(*claimRow)
		if n > 0 && r.NodeID != node {
			if err := flush(node, n); err != nil {
				return err
			}
			n = 0
		}
		node = r.NodeID
		n++
	}
	return flush(node, n)
}

// ClaimCountsByNode returns the number of claims on each node with any:
// O(nodes with claims), read from the counts kept in step with the claims
// table. ws, when not nil, is woken when a node's count changes.
func (snap *Snapshot) ClaimCountsByNode(ws memdb.WatchSet) (map[string]int, error) {
	it, err := snap.txn.Get(tableNodeClaims, indexID)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", tableNodeClaims, err)
	}
	watch(ws, it.WatchCh())
	counts := map[string]int{}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		r := raw.(*nodeClaimsRow)
		counts[r.NodeID] = r.Claims
	}
	return counts, nil
}
