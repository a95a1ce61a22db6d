package state

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// Checking a restore's rows ahead of their inserts.
//
// Restore's own goroutine inserts the rows in stream order, and its time
// is the restore's: a wiped follower's rejoin waits for it (BENCHMARKS.md
// "Where a wiped follower's rejoin goes"). At 200,000 volumes a fifth of
// that goroutine's CPU was the rows' own checks (validateRow) of the
// volumes and allocations (BenchmarkRestore's profile). Their checks read
// only earlier tables (sameTableFree), through one view of the table that
// never changes while its rows go in, so the next batch's can run on a
// goroutine of their own while this one inserts the batch before. Every
// other check (table order, raft indexes, duplicates, event rings) stays
// in stream order on Restore's goroutine, and rowChecked takes an answer
// given ahead only when it was given on the view it would read itself:
// a stream is refused at the same row with the same error either way.

// aheadTables are the tables whose rows are checked ahead: the large ones
// whose checks read other tables. An event's checks come after its place
// in its ring (placeEvent, in order) and cost little.
var aheadTables = map[string]bool{TableVolumes: true, TableAllocs: true}

// aheadCheck is validateRow's answer for one row, given on the view
// whose transaction is on (nil: the row was not checked ahead).
type aheadCheck struct {
	on  *memdb.Txn
	err error
}

// aheadView is a view to check rows of table on ahead of their inserts,
// or nil when the checker is not inside table (the view of a table is
// taken at its first row) or table's rows are not checked ahead.
func (c *rowChecker) aheadView(table string) *Snapshot {
	if !aheadTables[table] || c.view == nil || c.order < 0 || persistTables[c.order] != table {
		return nil
	}
	// The same transaction (a snapshot: reads only, safe beside the
	// inserts into txn), its own plugin cache (a map is one goroutine's).
	return &Snapshot{txn: c.view.txn, plugins: map[string]*structs.Plugin{}}
}

// checkAhead starts checking b's rows on a goroutine of its own when
// they can be: those of its first rows that are of one table the checker
// gives a view to check ahead on, up to a row of another table or one
// that failed to decode (the rest are checked in order). It returns a
// channel closed once their answers are in b (b.checked, which Restore
// waits for before the batch's rows), or nil when none is checked ahead.
func (c *rowChecker) checkAhead(b *rowBatch) chan struct{} {
	if len(b.rows) == 0 || b.rows[0].err != nil {
		return nil
	}
	table := b.rows[0].table
	view := c.aheadView(table)
	if view == nil {
		return nil
	}
	b.checked = make(chan struct{})
	go func() {
		defer close(b.checked)
		for i := range b.rows {
			r := &b.rows[i]
			if r.err != nil || r.table != table {
				return
			}
			r.ahead = aheadCheck{on: view.txn, err: validateRow(view, table, r.obj)}
		}
	}()
	return b.checked
}
