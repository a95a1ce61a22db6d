package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// Tables lists the tables in the order Persist and Rows write them: every
// table a row may refer to comes before it (plugins before the nodes and
// volumes that name them), which is what lets Builder validate each row
// against the rows before it.
func Tables() []string { return slices.Clone(persistTables) }

// Rows calls fn for every row of the snapshot, tables in Tables order, rows
// in primary key order. Objects are shared with the store: fn must not
// modify them. The operator snapshot codec (host/snapshot) writes its
// payload through it.
func (snap *Snapshot) Rows(fn func(table string, row any) error) error {
	for _, table := range persistTables {
		it, err := snap.txn.Get(table, indexID)
		if err != nil {
			return fmt.Errorf("read %s: %w", table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if err := fn(table, raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// DecodeRow decodes one persisted row of table (as Rows hands it out and
// Persist writes it).
func DecodeRow(table string, raw json.RawMessage) (any, error) {
	return decodeRow(table, raw)
}

// Builder builds a store from rows that come from outside (an operator
// snapshot), validating every row with the rules of the write that created
// it before it is inserted, and refusing duplicates. Nothing is visible
// anywhere until Store is called, so a refused row leaves no trace: a
// restore is all or nothing.
type Builder struct {
	db    *memdb.MemDB
	txn   *memdb.Txn
	rows  int
	check *rowChecker
	// restored: mark the claims of the volumes added (MarkClaimsRestored).
	restored bool
}

// MarkClaimsRestored makes the builder mark every claim of the volumes
// added after it, short of ready-to-free, as restored
// (structs.Claim.Restored): an operator snapshot is an older state the
// machines have moved on from, so what its claims recorded about staging
// may be stale, and the next claim on their machines stages again. The
// marks are in the state the restore replicates, so every replica
// installs the same one. A raft snapshot sent to a follower is the
// leader's current state, not an older one, and is not marked: a
// follower's state must equal the leader's.
func (b *Builder) MarkClaimsRestored() { b.restored = true }

// NewBuilder starts an empty store.
func NewBuilder() *Builder {
	db := newDB()
	txn := db.Txn(true)
	return &Builder{db: db, txn: txn, check: newRowChecker(db, txn)}
}

// Rows is how many rows were added.
func (b *Builder) Rows() int { return b.rows }

// Add validates one decoded row (see DecodeRow) against the rows before it
// and inserts it. Errors are *structs.ValidationError naming the table and
// field, or structs.ErrNotFound for a reference to a row that is missing.
func (b *Builder) Add(table string, row any) error {
	if err := b.check.row(table, row); err != nil {
		return err
	}
	if v, ok := row.(*structs.Volume); ok && b.restored {
		markRestored(v) // validated: no claim is null
	}
	if err := b.txn.Insert(table, row); err != nil {
		return fmt.Errorf("insert into %s: %w", table, err)
	}
	b.rows++
	return nil
}

// rowChecker validates the rows of a stream, in stream order, against the
// rows before them in txn, before anything reads them: every way a state
// comes in whole (a raft snapshot installed or replayed at start, an
// operator snapshot) goes through it, so a row no write could have made
// is refused with an error naming it and the rule. A null claim once got
// past the decoder and crashed every replica that installed the snapshot
// when the volume counters dereferenced it.
type rowChecker struct {
	txn *memdb.Txn
	// view is what the checks read: a read view of the rows inserted so
	// far. A read through the write transaction itself clones the index
	// it reads and drops that index's cache of nodes the transaction may
	// change in place, so every insert after it copied its path again:
	// validating through txn made a restore of 100,000 volumes three
	// times slower. The view is taken anew for every row, except in the
	// large tables whose checks read only earlier tables (sameTableFree),
	// where one view per table serves.
	view  *Snapshot
	ids   map[string]memdb.SingleIndexer // each table's primary key
	order int                            // position in persistTables of the last row's table
	rings ringCounter
	seq   uint64 // last event sequence number
	// index holds the index table's rows read so far: a row written at a
	// later raft index than its table's last write is not one a write
	// made, and blocking queries would miss it.
	index map[string]uint64
	// lastKey is the primary key of the current table's previous row.
	// Persist writes each table in strictly increasing key order, so a
	// row whose key comes after it cannot repeat one, and the lookup for
	// a duplicate (through txn) is needed only for a row that does not.
	lastKey []byte
	// unordered is set once a volume does not come after the one before
	// it: the restore then recounts the volumes from the table instead
	// of counting them as they come.
	unordered bool
}

func newRowChecker(db *memdb.MemDB, txn *memdb.Txn) *rowChecker {
	ids := map[string]memdb.SingleIndexer{}
	for _, table := range persistTables {
		if ix, ok := db.DBSchema().Tables[table].Indexes[indexID].Indexer.(memdb.SingleIndexer); ok {
			ids[table] = ix
		}
	}
	return &rowChecker{txn: txn, ids: ids, order: -1, rings: ringCounter{}, index: map[string]uint64{}}
}

// row checks one decoded row: its table's place in the stream, its own
// fields and references (validateRow), its raft indexes against its
// table's, and that no row with its key came before. An event row is
// placed in its ring (its Ring and RingSeq filled in when the stream
// predates rings).
func (c *rowChecker) row(table string, row any) error {
	return c.rowChecked(table, row, aheadCheck{})
}

// rowChecked is row for a row whose own checks (validateRow) may have run
// ahead, on another goroutine (restore_ahead.go): their answer is taken
// when it was given against the view row would read, and the checks run
// here otherwise. Every other check runs here, in stream order, so a
// stream is refused at the same row, with the same error, either way.
func (c *rowChecker) rowChecked(table string, row any, ahead aheadCheck) error {
	pos := slices.Index(persistTables, table)
	if pos < 0 {
		return structs.Invalid("table", "unknown table %q", table)
	}
	if pos < c.order {
		// Out of order: a row could then refer to one that comes later,
		// which the checks below would wrongly refuse or wrongly allow.
		return structs.Invalid("table", "%s row after %s rows: tables must come in the order %v", table, persistTables[c.order], persistTables)
	}
	if pos != c.order {
		c.order, c.lastKey = pos, nil
		c.view = nil
	}
	if c.view == nil || !sameTableFree[table] {
		c.view = &Snapshot{txn: c.txn.Snapshot()}
		if sameTableFree[table] {
			// The view serves the whole table and never changes: its
			// plugin lookups (one per volume) can be kept.
			c.view.plugins = map[string]*structs.Plugin{}
		}
	}
	if e, ok := row.(*eventRow); ok {
		if err := c.placeEvent(e); err != nil {
			return err
		}
	}
	err := ahead.err
	if ahead.on == nil || ahead.on != c.view.txn {
		err = validateRow(c.view, table, row)
	}
	if err != nil {
		return err
	}
	if v, ok := row.(*structs.Volume); ok {
		if err := recordLegacyPublish(c.view, v); err != nil {
			return err
		}
	}
	if err := c.indexes(table, row); err != nil {
		return err
	}
	if !c.inOrder(table, row) {
		if table == TableVolumes {
			c.unordered = true
		}
		dup, err := c.exists(table, row)
		if err != nil {
			return err
		}
		if dup {
			return structs.Invalid(table, "duplicate row %s", rowKey(row))
		}
	}
	if r, ok := row.(*indexRow); ok {
		c.index[r.Key] = r.Value
	}
	return nil
}

// sameTableFree are the tables whose rows' checks (validateRow) read no
// other row of their own table: a volume's its plugin and its claims'
// allocations, an allocation's its node, an event nothing. A duplicate
// is caught by key order (inOrder), not by the checks.
var sameTableFree = map[string]bool{TableVolumes: true, TableAllocs: true, TableEvents: true}

// inOrder says whether row's primary key comes strictly after the
// previous row's of its table.
func (c *rowChecker) inOrder(table string, row any) bool {
	ix := c.ids[table]
	if ix == nil {
		return false
	}
	ok, key, err := ix.FromObject(row)
	if !ok || err != nil {
		return false // the insert refuses it
	}
	in := c.lastKey == nil || bytes.Compare(c.lastKey, key) < 0
	c.lastKey = key
	return in
}

// indexes refuses a row whose modify index is above the index its table
// was last written at, or whose create index is above its modify index:
// counters no sequence of writes gives.
func (c *rowChecker) indexes(table string, row any) error {
	var create, modify uint64
	switch r := row.(type) {
	case *structs.Plugin:
		create, modify = r.CreateIndex, r.ModifyIndex
	case *structs.Node:
		create, modify = r.CreateIndex, r.ModifyIndex
	case *structs.Alloc:
		create, modify = r.CreateIndex, r.ModifyIndex
	case *structs.Volume:
		create, modify = r.CreateIndex, r.ModifyIndex
		for id, cl := range r.Claims { // not null: validateRow came first
			if cl.CreateIndex > cl.ModifyIndex || cl.ModifyIndex > modify {
				return structs.Invalid(fmt.Sprintf("claims[%s].modify_index", id), "claim indexes create %d, modify %d do not fit its volume's modify index %d", cl.CreateIndex, cl.ModifyIndex, modify)
			}
		}
	case *eventRow:
		create, modify = r.Index, r.Index
	case *structs.SchedulerCursor:
		create, modify = r.CreateIndex, r.ModifyIndex
	default:
		return nil
	}
	if create > modify {
		return structs.Invalid(table+".create_index", "%s %s: create index %d is above its modify index %d", table, rowKey(row), create, modify)
	}
	if last := c.index[table]; modify > last {
		return structs.Invalid(table+".modify_index", "%s %s was written at index %d, after the last write to %s (index %d)", table, rowKey(row), modify, table, last)
	}
	return nil
}

// exists says whether a row with the same primary key is already there
// (memdb's Insert would silently replace it).
func (c *rowChecker) exists(table string, row any) (bool, error) {
	var args []any
	switch r := row.(type) {
	case *indexRow:
		args = []any{r.Key}
	case *structs.Plugin:
		args = []any{r.ID}
	case *structs.Node:
		args = []any{r.ID}
	case *structs.Alloc:
		args = []any{r.ID}
	case *structs.Volume:
		args = []any{r.Namespace, r.ID}
	case *structs.Leftover:
		args = []any{r.ID}
	case *eventRow:
		args = []any{r.Seq}
	case *structs.ACLPolicy:
		args = []any{r.Name}
	case *structs.ACLToken:
		args = []any{r.AccessorID}
	case *aclBootstrapRow:
		args = []any{r.Key}
	case *structs.SchedulerCursor:
		args = []any{r.Source}
	default:
		return false, fmt.Errorf("%s: unexpected row type %T", table, row)
	}
	got, err := c.txn.First(table, indexID, args...)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", table, err)
	}
	return got != nil, nil
}

func rowKey(row any) string {
	switch r := row.(type) {
	case *indexRow:
		return r.Key
	case *structs.Plugin:
		return r.ID
	case *structs.Node:
		return r.ID
	case *structs.Alloc:
		return r.ID
	case *structs.Volume:
		return volName(r.Namespace, r.ID)
	case *structs.Leftover:
		return r.ID
	case *eventRow:
		return fmt.Sprint(r.Seq)
	case *structs.ACLPolicy:
		return r.Name
	case *structs.ACLToken:
		return r.AccessorID
	case *aclBootstrapRow:
		return r.Key
	case *structs.SchedulerCursor:
		return r.Source
	}
	return "?"
}

// placeEvent checks an event row's place: sequence numbers rising, the
// ring the one its event belongs to (a hand-edited ring could hide a claim
// event among the audit trail), ring sequence numbers rising.
func (c *rowChecker) placeEvent(e *eventRow) error {
	if e.Event == nil {
		return structs.Invalid("event", "is missing")
	}
	if e.Seq <= c.seq {
		return structs.Invalid("event.seq", "%d does not follow %d", e.Seq, c.seq)
	}
	c.seq = e.Seq
	if want := ringOf(e.Event); e.Ring != "" && e.Ring != want {
		return structs.Invalid("event.ring", "event %d is in ring %q but belongs to %q", e.Seq, e.Ring, want)
	}
	if e.RingSeq != 0 && e.RingSeq <= c.rings[ringOf(e.Event)] {
		return structs.Invalid("event.ring_seq", "event %d: ring sequence %d does not rise", e.Seq, e.RingSeq)
	}
	c.rings.place(e)
	return nil
}

// Store commits the rows into a new store (opts as for NewStore).
func (b *Builder) Store(opts ...Option) *Store {
	if err := errors.Join(recountStats(b.txn), rebuildVolumeMods(b.txn), rebuildClaims(b.txn), rebuildStuck(b.txn), recountNodeClaims(b.txn)); err != nil {
		// Reading a table of the builder's own transaction: an error is a bug.
		panic(fmt.Sprintf("state: %v", err))
	}
	b.txn.Commit()
	s := NewStore(opts...)
	s.cur.Store(&dbState{db: b.db, abandon: make(chan struct{})})
	s.events = derivedEvents(b.db)
	return s
}

// markRestored marks v's claims short of ready-to-free restored. v is a
// row just decoded, owned by the builder.
func markRestored(v *structs.Volume) {
	for _, c := range v.Claims {
		if c != nil && c.State != structs.ClaimReadyToFree {
			c.Restored = true
		}
	}
}
