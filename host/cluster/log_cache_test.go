package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore is a raft.LogStore that counts its reads and can refuse
// its writes.
type countingStore struct {
	raft.LogStore
	reads  int
	refuse error
}

func (s *countingStore) GetLog(index uint64, e *raft.Log) error {
	s.reads++
	return s.LogStore.GetLog(index, e)
}

func (s *countingStore) StoreLogs(es []*raft.Log) error {
	if s.refuse != nil {
		return fmt.Errorf("bolt: write: %w", s.refuse)
	}
	return s.LogStore.StoreLogs(es)
}

func (s *countingStore) StoreLog(e *raft.Log) error { return s.StoreLogs([]*raft.Log{e}) }

func logEntries(from, to, term uint64, size int) []*raft.Log {
	var es []*raft.Log
	for i := from; i <= to; i++ {
		es = append(es, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i), byte(term)}, size/2)})
	}
	return es
}

func TestLogCacheServesAppendedEntriesFromMemory(t *testing.T) {
	store := &countingStore{LogStore: raft.NewInmemStore()}
	c := newLogCache(store, 8, 1<<20)
	if err := c.StoreLogs(logEntries(1, 20, 1, 10)); err != nil {
		t.Fatal(err)
	}
	var e raft.Log
	for i := uint64(13); i <= 20; i++ {
		if err := c.GetLog(i, &e); err != nil || e.Index != i {
			t.Fatalf("GetLog(%d) = %d, %v", i, e.Index, err)
		}
	}
	if store.reads != 0 {
		t.Fatalf("the last 8 entries read the store %d times, want 0", store.reads)
	}
	// Index 12 shares its slot with 20: only the store has it.
	if err := c.GetLog(12, &e); err != nil || e.Index != 12 || store.reads != 1 {
		t.Fatalf("GetLog(12) = %d, %v with %d store reads, want 12 from the store", e.Index, err, store.reads)
	}
}

// A write the disk refused must reach raft, and from it the leader's
// answer, as the disk's error (diskRefused): raft's own LogCache
// flattens it into a string. And what the store did not take is not
// served from memory.
func TestLogCacheKeepsTheStoresErrorAndCachesNothingOnIt(t *testing.T) {
	store := &countingStore{LogStore: raft.NewInmemStore(), refuse: syscall.ENOSPC}
	c := newLogCache(faultLog{store, &storageFault{}}, 8, 1<<20)
	err := c.StoreLogs(logEntries(1, 2, 1, 10))
	if !errors.Is(err, syscall.ENOSPC) || !diskRefused(err) {
		t.Fatalf("StoreLogs error %v: not the disk's ENOSPC", err)
	}
	if err := c.StoreLog(logEntries(3, 3, 1, 10)[0]); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("StoreLog error %v: not the disk's ENOSPC", err)
	}
	var e raft.Log
	for i := uint64(1); i <= 3; i++ {
		if err := c.GetLog(i, &e); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) of an entry the store refused: %v, want ErrLogNotFound", i, err)
		}
	}
}

// The ring's bytes stay within its bound; an entry larger than an eighth
// of it is not cached; the newest entries are the ones kept.
func TestLogCacheHoldsItsByteBound(t *testing.T) {
	store := &countingStore{LogStore: raft.NewInmemStore()}
	c := newLogCache(store, 64, 1000)
	if err := c.StoreLogs(logEntries(1, 40, 1, 100)); err != nil {
		t.Fatal(err)
	}
	if c.bytes > 1000 {
		t.Fatalf("ring holds %d bytes, bound 1000", c.bytes)
	}
	var e raft.Log
	if err := c.GetLog(40, &e); err != nil || store.reads != 0 {
		t.Fatalf("newest entry: %v, %d store reads", err, store.reads)
	}
	if err := c.GetLog(30, &e); err != nil || store.reads != 1 {
		t.Fatalf("entry 30 of 40 at 100 bytes each in 1000: %v, %d store reads, want 1", err, store.reads)
	}
	if err := c.StoreLogs(logEntries(41, 41, 1, 200)); err != nil {
		t.Fatal(err)
	}
	if err := c.GetLog(41, &e); err != nil || store.reads != 2 || len(e.Data) != 200 {
		t.Fatalf("an entry over an eighth of the bound: %v, %d store reads, want it read from the store", err, store.reads)
	}
	if c.bytes > 1000 {
		t.Fatalf("ring holds %d bytes, bound 1000", c.bytes)
	}
}

// TestLogCacheAgreesWithItsStore runs raft's writes against the cache
// and the store beside it: appends in index order, compactions of the
// head, a follower's conflicting tail replaced by a new leader's
// entries (another term), and reads of every index. Every read must
// answer what the store holds, an entry or ErrLogNotFound.
func TestLogCacheAgreesWithItsStore(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 35))
			store := raft.NewInmemStore()
			c := newLogCache(store, 16, 16*60)
			first, last, term := uint64(1), uint64(0), uint64(1)
			for step := range 2000 {
				switch op := rng.IntN(10); {
				case op < 6: // append a batch
					n := uint64(1 + rng.IntN(12))
					if err := c.StoreLogs(logEntries(last+1, last+n, term, 2+2*rng.IntN(60))); err != nil {
						t.Fatal(err)
					}
					last += n
				case op < 8 && last >= first: // compact the head
					to := first + uint64(rng.IntN(int(last-first+1)))
					if err := c.DeleteRange(first, to); err != nil {
						t.Fatal(err)
					}
					first = to + 1
				case last >= first: // a new leader's term replaces the tail
					from := first + uint64(rng.IntN(int(last-first+1)))
					if err := c.DeleteRange(from, last); err != nil {
						t.Fatal(err)
					}
					term++
					last = from - 1
				}
				for i := first - min(first-1, 20); i <= last+2; i++ {
					var got, want raft.Log
					gerr, werr := c.GetLog(i, &got), store.GetLog(i, &want)
					if !errors.Is(gerr, werr) && !(gerr == nil && werr == nil) {
						t.Fatalf("step %d: GetLog(%d): cache %v, store %v", step, i, gerr, werr)
					}
					if werr == nil && (got.Index != want.Index || got.Term != want.Term || !bytes.Equal(got.Data, want.Data)) {
						t.Fatalf("step %d: GetLog(%d): cache (index %d term %d), store (index %d term %d)", step, i, got.Index, got.Term, want.Index, want.Term)
					}
				}
				if c.bytes > 16*60 {
					t.Fatalf("step %d: ring holds %d bytes, bound %d", step, c.bytes, 16*60)
				}
			}
		})
	}
}
