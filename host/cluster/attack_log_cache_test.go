package cluster

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// ---------------------------------------------------------------------
// The ring against the bbolt store, through the chain raft uses.
// ---------------------------------------------------------------------

// attackBolt opens a bbolt log store in a temp dir (not synced: what is
// tested is what the cache answers, not durability).
func attackBolt(t testing.TB) *raftboltdb.BoltStore {
	t.Helper()
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(t.TempDir(), "raft.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// flakyStore fails the next write with err. landed: the write reached the
// store anyway (an EIO whose outcome is unknown: written, then reported
// failed).
type flakyStore struct {
	raft.LogStore
	err    error
	landed bool
}

func (s *flakyStore) fail() (error, bool) {
	err, landed := s.err, s.landed
	s.err, s.landed = nil, false
	return err, landed
}

func (s *flakyStore) StoreLogs(es []*raft.Log) error {
	if err, landed := s.fail(); err != nil {
		if landed {
			if werr := s.LogStore.StoreLogs(es); werr != nil {
				return werr
			}
		}
		return fmt.Errorf("bolt: commit: %w", err)
	}
	return s.LogStore.StoreLogs(es)
}

func (s *flakyStore) StoreLog(e *raft.Log) error { return s.StoreLogs([]*raft.Log{e}) }

func (s *flakyStore) DeleteRange(lo, hi uint64) error {
	if err, landed := s.fail(); err != nil {
		if landed {
			if werr := s.LogStore.DeleteRange(lo, hi); werr != nil {
				return werr
			}
		}
		return fmt.Errorf("bolt: delete: %w", err)
	}
	return s.LogStore.DeleteRange(lo, hi)
}

// attackEntry is entry index of term with size bytes of data that name
// both (so a wrong entry is recognisable from its data alone).
func attackEntry(index, term uint64, size int) *raft.Log {
	d := make([]byte, max(size, 16))
	binary.BigEndian.PutUint64(d, index)
	binary.BigEndian.PutUint64(d[8:], term)
	for i := 16; i < len(d); i++ {
		d[i] = byte(index*31 + term*7 + uint64(i))
	}
	typ := raft.LogCommand
	switch index % 17 {
	case 3:
		typ = raft.LogNoop
	case 5:
		typ = raft.LogConfiguration
	}
	return &raft.Log{Index: index, Term: term, Type: typ, Data: d}
}

func attackEntries(from, to, term uint64, size func() int) []*raft.Log {
	var es []*raft.Log
	for i := from; i <= to; i++ {
		es = append(es, attackEntry(i, term, size()))
	}
	return es
}

// sameAsStore compares a read through the chain with the bolt store's
// own answer.
func sameAsStore(t *testing.T, what string, chain, store raft.LogStore, i uint64) {
	t.Helper()
	var got, want raft.Log
	gerr, werr := chain.GetLog(i, &got), store.GetLog(i, &want)
	switch {
	case werr != nil:
		if !errors.Is(gerr, werr) {
			t.Fatalf("%s: GetLog(%d): chain %v / entry (index %d term %d), store %v", what, i, gerr, got.Index, got.Term, werr)
		}
	case gerr != nil:
		t.Fatalf("%s: GetLog(%d): chain %v, store has (index %d term %d)", what, i, gerr, want.Index, want.Term)
	case got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data):
		t.Fatalf("%s: GetLog(%d): chain (index %d term %d type %v %d bytes), store (index %d term %d type %v %d bytes)",
			what, i, got.Index, got.Term, got.Type, len(got.Data), want.Index, want.Term, want.Type, len(want.Data))
	}
}

// ringDataBytes is what the ring's slots hold, counted from the slots
// (not from its own counter).
func ringDataBytes(c *logCache) (n int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, e := range c.ring {
		if e != nil {
			n += cap(e.Data) + cap(e.Extensions)
		}
	}
	return n
}

// TestAttackLogCacheChainMatchesBolt drives the chain raft is given
// (configLog, logCache, faultLog, bolt) with what raft's leader and
// follower loops do to a log: appends at raft's last index (batches of
// 1 to 300, entries from empty to past the ring's byte bound), head
// compactions, a conflicting tail deleted and replaced by a later term,
// and failed writes of every kind (refused: nothing written; EIO: written
// anyway). After every step, every index reads through the chain exactly
// as bolt answers it, every write error keeps its errno, and the ring's
// slots hold no more than its byte bound.
func TestAttackLogCacheChainMatchesBolt(t *testing.T) {
	const ringEntries, ringBytes = 16, 4096
	errs := []error{syscall.ENOSPC, syscall.EROFS, syscall.EDQUOT, syscall.EIO}
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0xa77ac))
			bolt := attackBolt(t)
			flaky := &flakyStore{LogStore: bolt}
			cache := newLogCache(faultLog{flaky, &storageFault{}}, ringEntries, ringBytes)
			chain := newConfigLog(cache)
			size := func() int {
				return []int{0, 16, 100, 300, ringBytes / 8, ringBytes/8 + 1, ringBytes, 3 * ringBytes}[rng.IntN(8)]
			}
			// raft's view: first index held, last index appended (lastLog).
			first, last, term, storeLast := uint64(1), uint64(0), uint64(1), uint64(0)
			inject := func() error {
				if rng.IntN(8) != 0 {
					return nil
				}
				err := errs[rng.IntN(len(errs))]
				flaky.err, flaky.landed = err, err == syscall.EIO && rng.IntN(2) == 0
				return err
			}
			// injected checks a write's outcome: the injected errno kept
			// (true), or no error when none was injected (false).
			injected := func(what string, want, err error) bool {
				t.Helper()
				if want != nil {
					if !errors.Is(err, want) {
						t.Fatalf("%s: error %v lost the injected errno", what, err)
					}
					return true
				}
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return false
			}
			for step := range 600 {
				what := ""
				switch op := rng.IntN(10); {
				case op < 6: // the leader's dispatchLogs, or a follower's append past its last
					n := uint64(1 + rng.IntN(40))
					if rng.IntN(10) == 0 {
						n = uint64(ringEntries*2 + rng.IntN(300))
					}
					es := attackEntries(last+1, last+n, term, size)
					want := inject()
					err := chain.StoreLogs(es)
					what = fmt.Sprintf("step %d: append %d-%d term %d (injected %v)", step, last+1, last+n, term, want)
					if want != nil {
						if !errors.Is(err, want) {
							t.Fatalf("%s: error %v lost the injected errno", what, err)
						}
						if flaky.landed || errors.Is(want, syscall.EIO) {
							storeLast = max(storeLast, last+n)
						}
						break
					}
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					last += n
					storeLast = max(storeLast, last)
				case op < 8 && last >= first: // compaction after a snapshot
					to := first + uint64(rng.IntN(int(last-first+1)))
					want := inject()
					err := chain.DeleteRange(first, to)
					what = fmt.Sprintf("step %d: compact %d-%d (injected %v)", step, first, to, want)
					if injected(what, want, err) {
						break
					}
					first = to + 1
				case last >= first: // a new leader's entries conflict at from
					from := first + uint64(rng.IntN(int(last-first+1)))
					want := inject()
					err := chain.DeleteRange(from, last)
					what = fmt.Sprintf("step %d: clear suffix %d-%d (injected %v)", step, from, last, want)
					if injected(what, want, err) {
						break
					}
					term++
					n := uint64(1 + rng.IntN(30))
					want = inject()
					err = chain.StoreLogs(attackEntries(from, from+n-1, term, size))
					what += fmt.Sprintf(", append %d-%d term %d (injected %v)", from, from+n-1, term, want)
					if want != nil {
						if !errors.Is(err, want) {
							t.Fatalf("%s: error %v lost the injected errno", what, err)
						}
						// raft leaves its last index as it was (its TODO).
						storeLast = max(storeLast, from+n-1)
						break
					}
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					last = from + n - 1
					storeLast = max(storeLast, last)
				}
				lo := first - min(first-1, 2*ringEntries)
				for i := lo; i <= max(last, storeLast)+3; i++ {
					sameAsStore(t, what, chain, bolt, i)
				}
				if n := ringDataBytes(cache); n > ringBytes {
					t.Fatalf("%s: the ring's slots hold %d bytes, bound %d", what, n, ringBytes)
				}
			}
		})
	}
}

// TestAttackLogCacheErrorsThroughTheChain: raft sees the disk's errno
// through configLog and the ring, for appends and deletes, and a read of
// what a refused write carried answers the store's ErrLogNotFound.
func TestAttackLogCacheErrorsThroughTheChain(t *testing.T) {
	for _, e := range []error{syscall.ENOSPC, syscall.EROFS, syscall.EDQUOT, syscall.EIO} {
		bolt := attackBolt(t)
		flaky := &flakyStore{LogStore: bolt}
		fault := &storageFault{}
		chain := newConfigLog(newLogCache(faultLog{flaky, fault}, 8, 1<<20))
		if err := chain.StoreLogs(attackEntries(1, 4, 1, func() int { return 32 })); err != nil {
			t.Fatal(err)
		}
		flaky.err = e
		err := chain.StoreLogs(attackEntries(5, 6, 1, func() int { return 32 }))
		if !errors.Is(err, e) || !errors.Is(fault.get(), e) || diskRefused(err) != (e != syscall.EIO) {
			t.Fatalf("%v: StoreLogs error %v (fault %v, refused %v)", e, err, fault.get(), diskRefused(err))
		}
		flaky.err = e
		if err := chain.StoreLog(attackEntry(5, 1, 32)); !errors.Is(err, e) {
			t.Fatalf("%v: StoreLog error %v", e, err)
		}
		flaky.err = e
		if err := chain.DeleteRange(3, 4); !errors.Is(err, e) {
			t.Fatalf("%v: DeleteRange error %v", e, err)
		}
		for i := uint64(1); i <= 7; i++ {
			var got raft.Log
			if err := chain.GetLog(i, &got); i >= 5 && !errors.Is(err, raft.ErrLogNotFound) {
				t.Fatalf("%v: GetLog(%d) of a refused write: %v (index %d)", e, i, err, got.Index)
			}
			sameAsStore(t, e.Error(), chain, bolt, i)
		}
	}
}

// TestAttackLogCacheByteBoundAnySizes: whatever sizes arrive (at, under
// and over an eighth of the bound, the bound itself, batches larger than
// the ring), the slots' data stays within the bound.
func TestAttackLogCacheByteBoundAnySizes(t *testing.T) {
	const bound = 1 << 16
	c := newLogCache(raft.NewInmemStore(), 256, bound)
	rng := rand.New(rand.NewPCG(7, 7))
	next := uint64(1)
	for step := range 400 {
		n := 1 + rng.IntN(300)
		var es []*raft.Log
		for range n {
			sz := []int{0, 1, bound/8 - 1, bound / 8, bound/8 + 1, bound, 2 * bound, 100}[rng.IntN(8)]
			es = append(es, &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: make([]byte, sz)})
			next++
		}
		if err := c.StoreLogs(es); err != nil {
			t.Fatal(err)
		}
		if got := ringDataBytes(c); got > bound {
			t.Fatalf("step %d: the ring's slots hold %d bytes, bound %d", step, got, bound)
		}
	}
}

// TestAttackLogCacheConcurrentReadsNeverStale: raft's replication
// goroutines read while its main goroutine appends, compacts and
// replaces tails. A read that starts after an index was replaced by a
// later term, or compacted away, must not answer the older entry; every
// answer is the entry it names or ErrLogNotFound. Run with -race.
func TestAttackLogCacheConcurrentReadsNeverStale(t *testing.T) {
	const maxIndex = 1 << 12
	bolt := attackBolt(t)
	cache := newLogCache(faultLog{bolt, &storageFault{}}, 32, 8192)
	chain := newConfigLog(cache)

	var replaced [maxIndex]atomic.Uint64 // the term an index was last replaced with, once stored
	var first, last atomic.Uint64
	first.Store(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	bad := make(chan string, 1)
	report := func(s string) {
		select {
		case bad <- s:
		default:
		}
	}
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 99))
			for {
				select {
				case <-stop:
					return
				default:
				}
				lo, hi := first.Load(), last.Load()
				i := lo - min(lo-1, 3) + uint64(rng.IntN(int(hi-lo+8)))
				if i == 0 || i >= maxIndex {
					continue
				}
				minTerm, compacted := replaced[i].Load(), i < lo
				var e raft.Log
				err := chain.GetLog(i, &e)
				switch {
				case err != nil && !errors.Is(err, raft.ErrLogNotFound):
					report(fmt.Sprintf("GetLog(%d): %v", i, err))
				case err != nil:
				case e.Index != i || len(e.Data) < 16 || binary.BigEndian.Uint64(e.Data) != i || binary.BigEndian.Uint64(e.Data[8:]) != e.Term:
					report(fmt.Sprintf("GetLog(%d) answered index %d term %d with data of another entry", i, e.Index, e.Term))
				case e.Term < minTerm:
					report(fmt.Sprintf("GetLog(%d) answered term %d, replaced by term %d before the read", i, e.Term, minTerm))
				case compacted:
					report(fmt.Sprintf("GetLog(%d) answered an entry compacted before the read (first %d)", i, lo))
				}
			}
		}()
	}

	rng := rand.New(rand.NewPCG(1, 2))
	size := func() int { return []int{16, 200, 1024, 1025, 9000}[rng.IntN(5)] }
	term := uint64(1)
	for last.Load()+400 < maxIndex {
		lo, hi := first.Load(), last.Load()
		switch op := rng.IntN(10); {
		case op < 6:
			n := uint64(1 + rng.IntN(64))
			if err := chain.StoreLogs(attackEntries(hi+1, hi+n, term, size)); err != nil {
				t.Fatal(err)
			}
			last.Store(hi + n)
		case op < 7 && hi > lo+50:
			to := lo + uint64(rng.IntN(int(hi-lo-40)))
			if err := chain.DeleteRange(lo, to); err != nil {
				t.Fatal(err)
			}
			first.Store(to + 1)
		case hi > lo+10:
			from := hi - uint64(rng.IntN(int(min(hi-lo, 60))))
			if err := chain.DeleteRange(from, hi); err != nil {
				t.Fatal(err)
			}
			term++
			n := uint64(1 + rng.IntN(40))
			if err := chain.StoreLogs(attackEntries(from, from+n-1, term, size)); err != nil {
				t.Fatal(err)
			}
			for i := from; i < from+n; i++ {
				replaced[i].Store(term)
			}
			last.Store(from + n - 1)
		}
		select {
		case s := <-bad:
			close(stop)
			wg.Wait()
			t.Fatal(s)
		default:
		}
	}
	close(stop)
	wg.Wait()
	select {
	case s := <-bad:
		t.Fatal(s)
	default:
	}
}

// ---------------------------------------------------------------------
// A real cluster: a leader's uncommitted tail truncated on its return, a
// large entry, a restart on the same data dir.
// ---------------------------------------------------------------------

// boltOf is the bbolt store under a server's chain.
func boltOf(t *testing.T, c *Cluster) (chain raft.LogStore, bolt raft.LogStore) {
	t.Helper()
	cl, ok := c.logs.(*configLog)
	if !ok {
		t.Fatalf("logs are %T", c.logs)
	}
	lc, ok := cl.LogStore.(*logCache)
	if !ok {
		t.Fatalf("configLog wraps %T, not the ring", cl.LogStore)
	}
	fl, ok := lc.LogStore.(faultLog)
	if !ok {
		t.Fatalf("the ring wraps %T", lc.LogStore)
	}
	return c.logs, fl.LogStore
}

// TestAttackClusterTruncatedTailConverges: three servers with data dirs;
// the leader is cut off and appends entries no one else has; the others
// elect a leader that writes (one entry past the ring's per-entry bound);
// the old leader returns and its tail is replaced. Then a follower
// restarts on its data dir. Every server converges to the leader's digest,
// every index reads through the chain as its bolt store holds it, and the
// servers' logs agree entry for entry up to the commit.
// applyOnLeader applies req on the leader among nodes, again on the next
// leader when leadership was lost meanwhile: two servers on a loaded
// machine (make test runs packages side by side) may lose their quorum's
// heartbeats, and the write is then sent again (a retried event append
// may land twice, which every server applies alike).
func applyOnLeader(t *testing.T, tc *tcluster, nodes []*node, typ structs.MessageType, req any) {
	t.Helper()
	ctx := testCtx(t)
	for {
		_, _, err := tc.leader(nodes...).c.Apply(ctx, typ, req)
		if err == nil {
			return
		}
		if !errors.Is(err, structs.ErrNoLeader) && !errors.Is(err, structs.ErrOutcomeUnknown) || ctx.Err() != nil {
			t.Fatalf("apply %d: %v", typ, err)
		}
	}
}

func TestAttackClusterTruncatedTailConverges(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	tc := newCluster(t, 3, dirs...)
	loadBase(t, tc.leader().c)
	tc.waitConverged()

	var old *node
	for attempt := 0; ; attempt++ {
		old = tc.leader()
		drainLeaderCh(old.c)
		before := old.c.raft.LastIndex()
		tc.partition(old)
		for range 5 {
			data, err := encodeCommand(structs.NodeStatusUpdateType, time.Now(), &structs.NodeStatusUpdateRequest{NodeID: "n1", Status: structs.NodeDown})
			if err != nil {
				t.Fatal(err)
			}
			old.c.raft.Apply(data, 0)
		}
		select {
		case <-old.c.LeaderCh():
		case <-testCtx(t).Done():
			t.Fatal("the cut-off leader never stepped down")
		}
		if old.c.raft.LastIndex() > before {
			t.Logf("old leader %s appended %d-%d alone", old.id, before+1, old.c.raft.LastIndex())
			break
		}
		if attempt == 5 {
			t.Fatal("the cut-off leader never appended an entry of its own")
		}
		tc.heal(old)
		tc.waitConverged()
	}
	majority := tc.followers(old)
	applyOnLeader(t, tc, majority, structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n2", Status: structs.NodeDown})
	// One entry past the ring's per-entry bound.
	applyOnLeader(t, tc, majority, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: strings.Repeat("x", logCacheBytes/8+1024)}}})
	for i := range 20 {
		applyOnLeader(t, tc, majority, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint("m", i)}}})
	}
	tc.heal(old)
	tc.waitConverged()
	n1, _ := old.s.Snapshot().NodeByID(nil, "n1")
	if n1 != nil && n1.Status == structs.NodeDown {
		t.Fatal("the old leader applied its own uncommitted entry")
	}

	// A follower restarts on its data dir while the leader writes on.
	l := tc.leader()
	f := tc.followers(l)[0]
	if err := f.c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	var live []*node
	for _, n := range tc.nodes {
		if n != f {
			live = append(live, n)
		}
	}
	for i := range 10 {
		applyOnLeader(t, tc, live, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint("r", i)}}})
	}
	live = append(live, tc.start(f.id, f.dir, 0, nil))
	tc.waitConverged(live...)

	commit := tc.leader(live...).c.raft.CommitIndex()
	var ref raft.LogStore
	var refFirst uint64
	for _, n := range live {
		chain, bolt := boltOf(t, n.c)
		lo, err := bolt.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		hi, err := bolt.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		for i := lo - min(lo, 3); i <= hi+2; i++ {
			sameAsStore(t, n.id, chain, bolt, i)
		}
		if ref == nil {
			ref, refFirst = bolt, lo
			continue
		}
		for i := max(lo, refFirst); i <= commit; i++ {
			var a, b raft.Log
			if ref.GetLog(i, &a) != nil || bolt.GetLog(i, &b) != nil {
				continue
			}
			if a.Term != b.Term || a.Type != b.Type || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("committed index %d differs: %s has term %d, %s term %d", i, live[0].id, a.Term, n.id, b.Term)
			}
		}
	}
}

// ---------------------------------------------------------------------
// Snapshot turns.
// ---------------------------------------------------------------------

// testClock is a settable clock that counts its reads.
type testClock struct {
	ns    atomic.Int64
	reads atomic.Int64
	// then, once set, is what reads after the first answers.
	then atomic.Int64
	// first is how many reads answer ns before then (0: one).
	first atomic.Int64
}

func (c *testClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

func (c *testClock) now() time.Time {
	if n := c.reads.Add(1); n > max(1, c.first.Load()) {
		if v := c.then.Load(); v != 0 {
			return time.Unix(0, v)
		}
	}
	return time.Unix(0, c.ns.Load())
}

// turnPeriod is the fake clock's period, and turnBase the start of one.
const turnPeriod = time.Second

var turnBase = time.Unix(1_800_000_000, 0)

// outOfTurnInterval is a SnapshotInterval whose first half (a single
// server's slot) the real clock is out of for the next ten minutes: the
// server's own schedule and fence, on the real clock, stay out of the
// test's way.
func outOfTurnInterval(t *testing.T) time.Duration {
	now := time.Now().UnixNano()
	for p := 30 * time.Minute; p < 60*time.Minute; p += time.Second {
		off := time.Duration(now % int64(p))
		if off >= p/2+time.Second && off < p-10*time.Minute {
			return p
		}
	}
	t.Fatal("no interval puts the real clock out of turn")
	return 0
}

// turnServer starts a single server whose own schedule never snapshots
// (threshold out of reach, real clock out of its slot).
func turnServer(t *testing.T, older bool) (*Cluster, string) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Server: true, BootstrapExpect: 1, NodeID: "s1",
		SnapshotInterval: outOfTurnInterval(t), SnapshotThreshold: 1 << 40, olderThanGates: older}
	c, _ := start(t, cfg)
	return c, filepath.Join(dir, "raft")
}

func applyEvents(t *testing.T, c *Cluster, n int) {
	for i := range n {
		mustApply(t, c, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint(i)}}})
	}
}

// inflateNewestSnapshot rewrites the newest snapshot's recorded size to
// that of a large state, so the fence waits for the turn rather than
// taking one at once (smallState).
func inflateNewestSnapshot(t *testing.T, dir string) {
	t.Helper()
	fss, err := raft.NewFileSnapshotStore(dir, snapshotsRetained, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	list, err := fss.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("no snapshot to inflate: %v", err)
	}
	path := filepath.Join(dir, "snapshots", list[0].ID, "meta.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["Size"] = json.RawMessage(fmt.Sprint(int64(1) << 32))
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if smallState(fss) {
		t.Fatal("precondition: the inflated snapshot still counts as small")
	}
}

// TestAttackScheduleNeverStartsOutsideItsHalfSlot: the schedule decides
// in its half slot, then waits at the gate behind a snapshot being
// written (an install from the leader, another request's snapshot) that
// ends without a snapshot recorded (cancelled: the log still holds the
// threshold). By then the clock is past the half slot: no scheduled
// snapshot may start.
func TestAttackScheduleNeverStartsOutsideItsHalfSlot(t *testing.T) {
	c, _ := turnServer(t, false)
	applyEvents(t, c, 6)

	end := c.snapGate.started() // a snapshot is being written
	clock := &testClock{}
	clock.set(turnBase.Add(turnPeriod / 10)) // in the first half of the slot
	s := snapshotSchedule{period: turnPeriod, threshold: 2, now: clock.now, turns: &snapshotTurns{period: turnPeriod}}
	c.wg.Add(1)
	go c.runSnapshotSchedule(s)
	testutil.WaitFor(t, "the schedule to decide in its half slot", func() bool { return clock.reads.Load() >= 1 })

	outside := turnBase.Add(turnPeriod * 7 / 10)
	clock.then.Store(outside.UnixNano())
	if inSnapshotSlot(outside, turnPeriod, 0, 1) {
		t.Fatal("precondition: 70% of the period is in the half slot")
	}
	end() // the snapshot in the way is cancelled
	testutil.WaitFor(t, "the schedule's next check", func() bool { return clock.reads.Load() >= 2 })
	if idx := lastSnapshotIndex(c); idx != 0 {
		t.Fatalf("a scheduled snapshot (index %d) started at %s into a %s period, past its half slot (%s)",
			idx, turnPeriod*7/10, turnPeriod, turnPeriod/2)
	}
}

// TestAttackFenceAfterTheTurnWasHad: the schedule took this period's turn;
// later in the same half slot a feature is enabled, and the fence (a
// large state: it waits for the turn) must not take a second snapshot in
// the period: its snapshot is the turn's, and the turn was had.
func TestAttackFenceAfterTheTurnWasHad(t *testing.T) {
	c, dir := turnServer(t, true)
	applyEvents(t, c, 6)

	turns := &snapshotTurns{period: turnPeriod}
	schedClock := &testClock{}
	schedClock.set(turnBase.Add(turnPeriod / 10))
	c.wg.Add(1)
	go c.runSnapshotSchedule(snapshotSchedule{period: turnPeriod, threshold: 2, now: schedClock.now, turns: turns})
	testutil.WaitFor(t, "the turn's snapshot", func() bool { return lastSnapshotIndex(c) > 0 })
	first := lastSnapshotIndex(c)
	if turns.open(turnBase.Add(turnPeriod/5), 0, 1) {
		t.Fatal("precondition: the turn taken is not recorded")
	}
	inflateNewestSnapshot(t, dir)

	if err := c.applyMeta(testCtx(t), featuresEnableType, metaCommand{Enable: []EnabledFeature{enabledOf(gates[0])}}); err != nil {
		t.Fatal(err)
	}
	applyEvents(t, c, 1)
	if v, err := newestSnapshotVersion(mustSnaps(t, dir), dir); err != nil || v == snapshotVersionFeatures {
		t.Fatalf("precondition: newest snapshot version %d, %v", v, err)
	}

	fenceClock := &testClock{}
	fenceClock.set(turnBase.Add(turnPeriod / 5)) // the same half slot
	done := make(chan struct{})
	c.wg.Add(1)
	go func() {
		defer close(done)
		c.runSnapshotFence(&snapshotSchedule{period: turnPeriod, threshold: 2, now: fenceClock.now, turns: turns}, mustSnaps(t, dir), dir)
	}()
	testutil.WaitFor(t, "the fence to finish or look again", func() bool {
		select {
		case <-done:
			return true
		default:
			return fenceClock.reads.Load() >= 3
		}
	})
	if idx := lastSnapshotIndex(c); idx != first {
		fenced := false
		select {
		case <-done:
			fenced = true
		default:
		}
		t.Fatalf("a second snapshot (index %d after %d; the fence under test finished: %v) in a period whose turn was had: the fence's snapshot is the turn's", idx, first, fenced)
	}
}

func mustSnaps(t *testing.T, dir string) *raft.FileSnapshotStore {
	fss, err := raft.NewFileSnapshotStore(dir, snapshotsRetained, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return fss
}

// TestAttackFenceTurnIsTheSlotItStartedIn: the fence's snapshot started in
// this period's half slot and ran past the period's end. It is this
// period's turn; the next period's must stay open.
func TestAttackFenceTurnIsTheSlotItStartedIn(t *testing.T) {
	c, dir := turnServer(t, true)
	applyEvents(t, c, 3)
	// The fence needs a snapshot to look at: an operator's (no turn), of a
	// large state.
	if err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	before := lastSnapshotIndex(c)
	inflateNewestSnapshot(t, dir)
	applyEvents(t, c, 1)
	if err := c.applyMeta(testCtx(t), featuresEnableType, metaCommand{Enable: []EnabledFeature{enabledOf(gates[0])}}); err != nil {
		t.Fatal(err)
	}
	turns := &snapshotTurns{period: turnPeriod}
	clock := &testClock{}
	clock.set(turnBase.Add(turnPeriod / 10)) // decided in this period's slot
	// The fence reads the clock twice before its snapshot starts (its
	// look at the turn, and its claim under the gate); every read after
	// those is in the next period.
	clock.first.Store(2)
	clock.then.Store(turnBase.Add(turnPeriod * 11 / 10).UnixNano())
	done := make(chan struct{})
	c.wg.Add(1)
	go func() {
		defer close(done)
		c.runSnapshotFence(&snapshotSchedule{period: turnPeriod, threshold: 2, now: clock.now, turns: turns}, mustSnaps(t, dir), dir)
	}()
	select {
	case <-done:
	case <-testCtx(t).Done():
		t.Fatal("the fence never ran")
	}
	if lastSnapshotIndex(c) == before {
		t.Fatal("precondition: the fence took no snapshot")
	}
	if !turns.open(turnBase.Add(turnPeriod*11/10), 0, 1) {
		t.Fatal("the fence's snapshot, started in one period's slot, used up the next period's turn")
	}
}
