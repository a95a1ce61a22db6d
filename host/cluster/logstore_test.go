package cluster

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// A raft log file written with bbolt's default options (every data dir
// before the log store's options) opens with them, keeps its entries and
// takes new ones, after a compaction too; and a file the log store wrote
// opens with the defaults again (a downgrade).
func TestLogStoreOpensFilesWrittenEitherWay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	store := func(st *raftboltdb.BoltStore, from, to uint64) {
		t.Helper()
		for i := from; i <= to; i++ {
			if err := st.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: make([]byte, 64<<10)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(st *raftboltdb.BoltStore, first, last uint64) {
		t.Helper()
		f, err1 := st.FirstIndex()
		l, err2 := st.LastIndex()
		if err1 != nil || err2 != nil || f != first || l != last {
			t.Fatalf("log holds %d-%d (%v, %v), want %d-%d", f, l, err1, err2, first, last)
		}
		var lg raft.Log
		for i := first; i <= last; i++ {
			if err := st.GetLog(i, &lg); err != nil || lg.Index != i || len(lg.Data) != 64<<10 {
				t.Fatalf("entry %d: %v", i, err)
			}
		}
	}
	old, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	store(old, 1, 50)
	if err := old.DeleteRange(1, 40); err != nil { // a compaction: freed pages
		t.Fatal(err)
	}
	old.Close()

	st, err := openLogStore(path)
	if err != nil {
		t.Fatal(err)
	}
	check(st, 41, 50)
	store(st, 51, 80)
	if err := st.DeleteRange(41, 60); err != nil {
		t.Fatal(err)
	}
	store(st, 81, 90) // reuses pages the rebuilt freelist holds
	check(st, 61, 90)
	st.Close()

	back, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	check(back, 61, 90)
	store(back, 91, 95)
	check(back, 61, 95)
	back.Close()
}
