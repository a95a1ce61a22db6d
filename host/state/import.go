package state

import (
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
	order int // position in persistTables of the last row's table
	rings ringCounter
	seq   uint64 // last event sequence number
}

// NewBuilder starts an empty store.
func NewBuilder() *Builder {
	db := newDB()
	return &Builder{db: db, txn: db.Txn(true), rings: ringCounter{}}
}

// Rows is how many rows were added.
func (b *Builder) Rows() int { return b.rows }

// Add validates one decoded row (see DecodeRow) against the rows before it
// and inserts it. Errors are *structs.ValidationError naming the table and
// field, or structs.ErrNotFound for a reference to a row that is missing.
func (b *Builder) Add(table string, row any) error {
	pos := slices.Index(persistTables, table)
	if pos < 0 {
		return structs.Invalid("table", "unknown table %q", table)
	}
	if pos < b.order {
		// Out of order: a row could then refer to one that comes later,
		// which the checks below would wrongly refuse or wrongly allow.
		return structs.Invalid("table", "%s row after %s rows: tables must come in the order %v", table, persistTables[b.order], persistTables)
	}
	b.order = pos
	if e, ok := row.(*eventRow); ok {
		if err := b.placeEvent(e); err != nil {
			return err
		}
	}
	snap := &Snapshot{txn: b.txn}
	if err := validateRow(snap, table, row); err != nil {
		return err
	}
	dup, err := b.exists(table, row)
	if err != nil {
		return err
	}
	if dup {
		return structs.Invalid(table, "duplicate row %s", rowKey(row))
	}
	if err := b.txn.Insert(table, row); err != nil {
		return fmt.Errorf("insert into %s: %w", table, err)
	}
	b.rows++
	return nil
}

// exists says whether a row with the same primary key is already there
// (memdb's Insert would silently replace it).
func (b *Builder) exists(table string, row any) (bool, error) {
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
	default:
		return false, fmt.Errorf("%s: unexpected row type %T", table, row)
	}
	got, err := b.txn.First(table, indexID, args...)
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
	}
	return "?"
}

// placeEvent checks an event row's place: sequence numbers rising, the
// ring the one its event belongs to (a hand-edited ring could hide a claim
// event among the audit trail), ring sequence numbers rising.
func (b *Builder) placeEvent(e *eventRow) error {
	if e.Event == nil {
		return structs.Invalid("event", "is missing")
	}
	if e.Seq <= b.seq {
		return structs.Invalid("event.seq", "%d does not follow %d", e.Seq, b.seq)
	}
	b.seq = e.Seq
	if want := ringOf(e.Event); e.Ring != "" && e.Ring != want {
		return structs.Invalid("event.ring", "event %d is in ring %q but belongs to %q", e.Seq, e.Ring, want)
	}
	if e.RingSeq != 0 && e.RingSeq <= b.rings[ringOf(e.Event)] {
		return structs.Invalid("event.ring_seq", "event %d: ring sequence %d does not rise", e.Seq, e.RingSeq)
	}
	b.rings.place(e)
	return nil
}

// Store commits the rows into a new store (opts as for NewStore).
func (b *Builder) Store(opts ...Option) *Store {
	if err := errors.Join(recountStats(b.txn), rebuildVolumeMods(b.txn), rebuildClaims(b.txn), rebuildStuck(b.txn)); err != nil {
		// Reading a table of the builder's own transaction: an error is a bug.
		panic(fmt.Sprintf("state: %v", err))
	}
	b.txn.Commit()
	s := NewStore(opts...)
	s.cur.Store(&dbState{db: b.db, abandon: make(chan struct{})})
	s.volEvents = countVolumeEvents(b.db)
	return s
}
