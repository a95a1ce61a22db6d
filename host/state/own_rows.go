package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// Reads of a write transaction's own writes without memdb's read path
// (BenchmarkReleaseWrites measures both ways). memdb reads an index the transaction has modified
// through a clone of that index's radix transaction, and go-immutable-radix
// drops the writable-node cache of a transaction it clones (Txn.Clone: "to
// avoid leaking future writes into the clone"). So every read of a volume
// or an allocation by ID between two writes of the same table made the
// next write copy its whole radix path again, and start a new writable-node
// cache, instead of sharing the nodes the transaction had already copied:
// in a group commit of checkpoints each checkpoint reads its volume before
// writing it, and an allocation update of 1,000 allocations read each one
// (and each claimed volume) before writing it. What the group commit was to
// share per raft entry was lost per write.
//
// ownRows answers those reads exactly as the transaction would: a row this
// transaction wrote (or deleted) is answered from what it wrote; any other
// row is the same in the transaction as in the state before it, and is read
// there (base, a read transaction opened with the write one, under the
// store's write lock). Every write of the volumes and allocs tables in a
// writer goes through insertRow or deleteRow, which record it here.
// Reads with a watch set, of other tables or by other indexes still go
// through the transaction.
type ownRows struct {
	txn    *memdb.Txn // the write transaction, for ownRowsCheck
	base   *memdb.Txn
	vols   map[structs.VolumeRef]*structs.Volume // nil: deleted
	allocs map[string]*structs.Alloc             // nil: deleted
}

// Seams for the tests: ownRowsOff writes without ownRows (what
// TestOwnRowsKeepRadixCache compares against), ownRowsCheck compares every
// answer, and an event's read of its ring before the transaction
// (events.go), with the transaction's own read (TestMain turns it on for
// every test of the package).
var ownRowsOff, ownRowsCheck bool

// wrote records a write of obj into table (deleted: a delete).
func (o *ownRows) wrote(table string, obj any, deleted bool) {
	if o == nil {
		return
	}
	switch table {
	case TableVolumes:
		v := obj.(*structs.Volume)
		if o.vols == nil {
			o.vols = map[structs.VolumeRef]*structs.Volume{}
		}
		ref := structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}
		if deleted {
			v = nil
		}
		o.vols[ref] = v
	case TableAllocs:
		a := obj.(*structs.Alloc)
		if o.allocs == nil {
			o.allocs = map[string]*structs.Alloc{}
		}
		id := a.ID
		if deleted {
			a = nil
		}
		o.allocs[id] = a
	}
}

func (o *ownRows) volume(namespace, id string) (*structs.Volume, error) {
	v, ok := o.vols[structs.VolumeRef{Namespace: namespace, ID: id}]
	if !ok {
		raw, err := o.base.First(TableVolumes, indexID, namespace, id)
		if err != nil {
			return nil, fmt.Errorf("read %s by %s: %w", TableVolumes, indexID, err)
		}
		v, _ = raw.(*structs.Volume)
	}
	if ownRowsCheck {
		o.check(v, TableVolumes, namespace, id)
	}
	return v, nil
}

func (o *ownRows) alloc(id string) (*structs.Alloc, error) {
	a, ok := o.allocs[id]
	if !ok {
		raw, err := o.base.First(TableAllocs, indexID, id)
		if err != nil {
			return nil, fmt.Errorf("read %s by %s: %w", TableAllocs, indexID, err)
		}
		a, _ = raw.(*structs.Alloc)
	}
	if ownRowsCheck {
		o.check(a, TableAllocs, id)
	}
	return a, nil
}

// check panics unless got is the very object the transaction's own read
// answers (nil when it has none).
func (o *ownRows) check(got any, table string, args ...any) {
	want, err := o.txn.First(table, indexID, args...)
	if err != nil {
		panic(fmt.Sprintf("ownRows check: read %s %v: %v", table, args, err))
	}
	if want == nil {
		if v, ok := got.(*structs.Volume); ok && v == nil {
			return
		}
		if a, ok := got.(*structs.Alloc); ok && a == nil {
			return
		}
	}
	if got != want {
		panic(fmt.Sprintf("ownRows check: %s %v reads %v, the transaction %v", table, args, got, want))
	}
}
