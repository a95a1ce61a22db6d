package state

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// Attack tests for the radix fork's "a transaction from an empty tree owns
// its nodes" and pooled maps (third_party/go-immutable-radix), through
// go-memdb and the store. They judge by what reads return and which watch
// channels close.

func persistSnap(t *testing.T, snap *Snapshot) string {
	t.Helper()
	var b bytes.Buffer
	if err := snap.Persist(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// restoredFixture returns a fixture whose store was freshly restored from
// a persisted base fixture (every index of the new database was built by
// a transaction from an empty tree).
func restoredFixture(t *testing.T) *fixture {
	t.Helper()
	src := newFixture(t)
	var buf bytes.Buffer
	if err := src.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	f := newEmpty(t)
	if err := f.s.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	f.idx = src.idx
	if f.digest() != src.digest() {
		t.Fatal("restored store differs from its source")
	}
	return f
}

// A Snapshot of a freshly restored store keeps what it read across writes.
func TestRadixForkRestoredSnapshotStaysFixed(t *testing.T) {
	f := restoredFixture(t)
	snap := f.s.Snapshot()
	before := persistSnap(t, snap)
	vBefore, err := snap.VolumeByID(nil, "default", "vol-ms")
	if err != nil || vBefore == nil {
		t.Fatalf("vol-ms: %v %v", vBefore, err)
	}
	claimsBefore := len(vBefore.Claims)
	f.claim("vol-ms", "a1", structs.ClaimWrite)
	f.must(structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: "t"}}})
	b := loadBase(t)
	n := b.Nodes[0]
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n})
	if after := persistSnap(t, snap); after != before {
		t.Fatal("a snapshot taken before writes to a restored store changed")
	}
	v, _ := snap.VolumeByID(nil, "default", "vol-ms")
	if v != vBefore || len(v.Claims) != claimsBefore {
		t.Fatal("the snapshot's vol-ms changed")
	}
	if cur := f.volume("default", "vol-ms"); len(cur.Claims) != claimsBefore+1 {
		t.Fatalf("the write is not in the store: %d claims", len(cur.Claims))
	}
}

// Blocking queries on a freshly restored store wake on the first write.
func TestRadixForkRestoredStoreBlockingQueriesWake(t *testing.T) {
	f := restoredFixture(t)
	min := f.index(TableVolumes)
	runs, done := startQuery(context.Background(), f.s, min, time.Hour)
	waitRun(t, runs)

	feed := make(chan uint64, 1)
	go func() {
		_, idx, err := f.s.VolumesChangedSince(context.Background(), min)
		if err != nil {
			idx = 0
		}
		feed <- idx
	}()
	// A watch on a volume the feed's reads also depend on: vol-ms itself.
	ws := memdb.NewWatchSet()
	if _, err := f.s.Snapshot().VolumeByID(ws, "default", "vol-ms"); err != nil {
		t.Fatal(err)
	}
	f.must(structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: "t"}}})
	assertPending(t, done)
	f.claim("vol-ms", "a1", structs.ClaimWrite)
	r := waitResult(t, done)
	if r.err != nil || r.index != f.idx {
		t.Fatalf("blocking query result %+v, want index %d", r, f.idx)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case idx := <-feed:
		if idx != f.idx {
			t.Fatalf("VolumesChangedSince returned %d, want %d", idx, f.idx)
		}
	case <-ctx.Done():
		t.Fatal("VolumesChangedSince never woke after a write to a restored store")
	}
	if ws.WatchCtx(ctx) != nil {
		t.Fatal("the watch on vol-ms did not fire")
	}
}

// A fresh store: a watch on a table nothing was ever written to fires on
// its first write, and again on the next (the write after a transaction
// from an empty tree).
func TestRadixForkFreshStoreWatchesFire(t *testing.T) {
	f := newEmpty(t)
	b := loadBase(t)
	ws := memdb.NewWatchSet()
	if _, err := f.s.Snapshot().Plugins(ws); err != nil {
		t.Fatal(err)
	}
	ws2 := memdb.NewWatchSet()
	if _, err := f.s.Snapshot().PluginByID(ws2, b.Plugins[1].ID); err != nil {
		t.Fatal(err)
	}
	f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: b.Plugins[0]})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ws.WatchCtx(ctx) != nil {
		t.Fatal("a watch on the empty plugins table did not fire on its first write")
	}
	ws3 := memdb.NewWatchSet()
	if _, err := f.s.Snapshot().PluginByID(ws3, b.Plugins[1].ID); err != nil {
		t.Fatal(err)
	}
	f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: b.Plugins[1]})
	if ws2.WatchCtx(ctx) != nil {
		t.Fatalf("a watch for %s taken on the empty table did not fire", b.Plugins[1].ID)
	}
	if ws3.WatchCtx(ctx) != nil {
		t.Fatalf("a watch for %s taken after the first write did not fire", b.Plugins[1].ID)
	}
}

type forkRow struct {
	ID  string
	Grp string
	Val int
}

func forkDB(t *testing.T) *memdb.MemDB {
	t.Helper()
	db, err := memdb.NewMemDB(&memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		"rows": {Name: "rows", Indexes: map[string]*memdb.IndexSchema{
			"id":  {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "ID"}},
			"grp": {Name: "grp", Indexer: &memdb.StringFieldIndex{Field: "Grp"}},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func forkRows(t *testing.T, txn *memdb.Txn) []string {
	t.Helper()
	it, err := txn.Get("rows", "id")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for o := it.Next(); o != nil; o = it.Next() {
		r := o.(*forkRow)
		out = append(out, fmt.Sprintf("%s/%s=%d", r.ID, r.Grp, r.Val))
	}
	return out
}

// go-memdb on a fresh database: a write transaction (every index
// transaction starts from an empty tree) reads with watches inside
// itself, takes a Snapshot mid-way, writes on. The Snapshot and an
// iterator taken before later writes keep their contents; watches taken
// in the transaction and on the Snapshot fire at commit; a read
// transaction opened before the commit is unchanged.
func TestRadixForkMemdbFreshTxnSnapshotAndWatches(t *testing.T) {
	db := forkDB(t)
	before := db.Txn(false)
	wsEmpty := memdb.NewWatchSet()
	if _, err := before.Get("rows", "grp", "g1"); err != nil {
		t.Fatal(err)
	}
	it0, _ := before.Get("rows", "id")
	wsEmpty.Add(it0.WatchCh())

	txn := db.Txn(true)
	for i := range 50 {
		if err := txn.Insert("rows", &forkRow{ID: fmt.Sprintf("r%02d", i), Grp: fmt.Sprintf("g%d", i%3), Val: i}); err != nil {
			t.Fatal(err)
		}
	}
	// Reads with watches inside the write transaction.
	wsIn := memdb.NewWatchSet()
	ch, _, err := txn.FirstWatch("rows", "id", "r07x")
	if err != nil {
		t.Fatal(err)
	}
	wsIn.Add(ch)
	ch2, _, _ := txn.FirstWatch("rows", "id", "r10")
	wsIn2 := memdb.NewWatchSet()
	wsIn2.Add(ch2)
	itIn, _ := txn.Get("rows", "grp", "g1")
	var inBefore []string
	for o := itIn.Next(); o != nil; o = itIn.Next() {
		inBefore = append(inBefore, o.(*forkRow).ID)
	}
	if len(inBefore) != 17 { // r01, r04, ... r49
		t.Fatalf("the transaction reads %d rows of g1 inside itself, want 17: %v", len(inBefore), inBefore)
	}

	snap := txn.Snapshot()
	snapRows := forkRows(t, snap)
	wsSnap := memdb.NewWatchSet()
	chS, _, _ := snap.FirstWatch("rows", "id", "r20")
	wsSnap.Add(chS)
	itSnap, _ := snap.Get("rows", "grp", "g2")
	wsSnapGrp := memdb.NewWatchSet()
	wsSnapGrp.Add(itSnap.WatchCh())

	// Writes after the snapshot.
	if err := txn.Insert("rows", &forkRow{ID: "r07x", Grp: "g1", Val: 700}); err != nil {
		t.Fatal(err)
	}
	if err := txn.Insert("rows", &forkRow{ID: "r10", Grp: "g1", Val: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := txn.Insert("rows", &forkRow{ID: "r20", Grp: "g2", Val: 2000}); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.DeleteAll("rows", "grp", "g0"); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.DeletePrefix("rows", "id_prefix", "r4"); err != nil {
		t.Fatal(err)
	}
	snap2 := txn.Snapshot()
	snap2Rows := forkRows(t, snap2)
	if err := txn.Insert("rows", &forkRow{ID: "r49z", Grp: "g9", Val: 1}); err != nil {
		t.Fatal(err)
	}
	txn.Commit()

	if got := forkRows(t, snap); fmt.Sprint(got) != fmt.Sprint(snapRows) {
		t.Fatalf("the mid-transaction Snapshot changed:\n%v\nwas\n%v", got, snapRows)
	}
	if got := forkRows(t, snap2); fmt.Sprint(got) != fmt.Sprint(snap2Rows) {
		t.Fatalf("the second Snapshot changed:\n%v\nwas\n%v", got, snap2Rows)
	}
	var snapG2 []string
	for o := itSnap.Next(); o != nil; o = itSnap.Next() {
		snapG2 = append(snapG2, o.(*forkRow).ID)
	}
	if len(snapG2) != 16 || snapG2[0] != "r02" {
		t.Fatalf("an iterator on the Snapshot gave %v", snapG2)
	}
	if len(forkRows(t, before)) != 0 {
		t.Fatal("a read transaction opened before the write sees rows")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, ws := range map[string]memdb.WatchSet{
		"empty table, before the write": wsEmpty,
		"r07x absent, in the write":     wsIn,
		"r10, in the write":             wsIn2,
		"r20 on the Snapshot":           wsSnap,
		"g2 iterator on the Snapshot":   wsSnapGrp,
	} {
		if ws.WatchCtx(ctx) != nil {
			t.Errorf("watch %q did not fire on commit", name)
		}
	}
	it, _ := db.Txn(false).Get("rows", "id")
	var got []string
	for o := it.Next(); o != nil; o = it.Next() {
		got = append(got, o.(*forkRow).ID)
	}
	var want []string
	for i := range 50 {
		id := fmt.Sprintf("r%02d", i)
		if i%3 == 0 || id[:2] == "r4" {
			continue
		}
		want = append(want, id)
		if id == "r07" {
			want = append(want, "r07x")
		}
	}
	want = append(want, "r49z")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("final table holds %v, want %v", got, want)
	}
}

// Many fresh databases written, snapshotted and committed at once on
// several goroutines (pooled maps would be shared between them if one
// went back while in use; -race).
func TestRadixForkMemdbConcurrentFreshDBs(t *testing.T) {
	done := make(chan error, 8)
	for g := range 8 {
		go func() {
			for round := range 30 {
				db := forkDB(t)
				txn := db.Txn(true)
				var snaps []*memdb.Txn
				var want []int
				for i := range 40 {
					if err := txn.Insert("rows", &forkRow{ID: fmt.Sprintf("g%d-%02d", g, i), Grp: "x", Val: round}); err != nil {
						done <- err
						return
					}
					if i%10 == 9 {
						snaps = append(snaps, txn.Snapshot())
						want = append(want, i+1)
						if _, err := txn.First("rows", "grp", "x"); err != nil {
							done <- err
							return
						}
					}
				}
				txn.Commit()
				for j, s := range snaps {
					it, _ := s.Get("rows", "id")
					n := 0
					for o := it.Next(); o != nil; o = it.Next() {
						n++
					}
					if n != want[j] {
						done <- fmt.Errorf("g%d round %d: snapshot %d holds %d rows, want %d", g, round, j, n, want[j])
						return
					}
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
