package cluster

// Red-team attacks on the fresh snapshot for a follower that needs one
// (snapshot_fresh.go). The servers keep their snapshots in files, as in
// production (a data dir each), with in-memory transports.
//
// Two hooks, both below volhost, where raft meets its stores:
//   - hookStore wraps the snapshot store raft was given (under the
//     freshSnapshots wrapper, reached through raft's private field: raft
//     offers no other way to put a store under a running node). It counts
//     the snapshots raft starts (Create), can hold a snapshot in flight
//     (gate) and can make a snapshot fail after it was written whole
//     (Close returns ENOSPC, as a full disk's fsync or rename would).
//   - hookTransport wraps a node's transport: it counts InstallSnapshot
//     RPCs per peer and can make them fail (a follower that cannot take
//     a snapshot: its disk is full, the stream breaks).

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

type hookStore struct {
	raft.SnapshotStore
	mu      sync.Mutex
	gate    chan struct{} // non-nil: Create waits until it is closed
	entered chan struct{} // one per Create that waits at the gate
	fail    atomic.Bool   // a snapshot fails once written whole
	creates atomic.Int64  // snapshots raft started
}

func (h *hookStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	h.creates.Add(1)
	h.mu.Lock()
	g := h.gate
	h.mu.Unlock()
	if g != nil {
		h.entered <- struct{}{}
		<-g
	}
	sink, err := h.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &hookSink{SnapshotSink: sink, h: h}, nil
}

// hold makes the next snapshots wait in Create until release (open).
func (h *hookStore) hold() (release func()) {
	h.mu.Lock()
	if h.gate == nil {
		h.gate = make(chan struct{})
	}
	h.mu.Unlock()
	return h.open
}

// open lets every held snapshot go on.
func (h *hookStore) open() {
	h.mu.Lock()
	g := h.gate
	h.gate = nil
	h.mu.Unlock()
	if g != nil {
		close(g)
	}
}

func (h *hookStore) waitEntered(t testing.TB) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(testutil.Deadline):
		t.Fatal("no snapshot started")
	}
}

type hookSink struct {
	raft.SnapshotSink
	h *hookStore
}

func (s *hookSink) Close() error {
	if s.h.fail.Load() {
		_ = s.SnapshotSink.Cancel()
		return fmt.Errorf("injected: sync snapshot: %w", syscall.ENOSPC)
	}
	return s.SnapshotSink.Close()
}

type hookTransport struct {
	*raft.InmemTransport
	mu       sync.Mutex
	refuse   map[raft.ServerID]bool
	installs map[raft.ServerID]int
}

func (h *hookTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest,
	resp *raft.InstallSnapshotResponse, data io.Reader) error {
	h.mu.Lock()
	h.installs[id]++
	refuse := h.refuse[id]
	h.mu.Unlock()
	if refuse {
		return fmt.Errorf("injected: %s cannot take the snapshot", id)
	}
	return h.InmemTransport.InstallSnapshot(id, target, args, resp, data)
}

func (h *hookTransport) setRefuse(id string, v bool) {
	h.mu.Lock()
	h.refuse[raft.ServerID(id)] = v
	h.mu.Unlock()
}

func (h *hookTransport) installsTo(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.installs[raft.ServerID(id)]
}

// hookSnapshots puts a hookStore under c's freshSnapshots wrapper. Call it
// before c talks to any other server.
func hookSnapshots(t testing.TB, c *Cluster) *hookStore {
	t.Helper()
	f := reflect.ValueOf(c.raft).Elem().FieldByName("snapshots")
	if !f.IsValid() {
		t.Fatal("raft.Raft has no snapshots field any more: update hookSnapshots for this raft version")
	}
	v := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface()
	fresh, ok := v.(*freshSnapshots)
	if !ok {
		t.Fatalf("raft's snapshot store is %T, not the freshSnapshots wrapper", v)
	}
	h := &hookStore{SnapshotStore: fresh.SnapshotStore, entered: make(chan struct{}, 64)}
	fresh.SnapshotStore = h
	return h
}

type hnode struct {
	*node
	store *hookStore
	tr    *hookTransport
	log   *testutil.SyncBuffer
}

// startHooked starts a server with a data dir, a hooked transport and a
// hooked snapshot store, logging at INFO into a buffer.
func (tc *tcluster) startHooked(id string, expect int, mod func(*Config)) *hnode {
	tc.t.Helper()
	_, trans := raft.NewInmemTransport(raft.ServerAddress("raft-" + id))
	ht := &hookTransport{InmemTransport: trans, refuse: map[raft.ServerID]bool{}, installs: map[raft.ServerID]int{}}
	dir := tc.t.TempDir()
	cfg := serverConfig(id, dir, ht, expect)
	if mod != nil {
		mod(&cfg)
	}
	buf := &testutil.SyncBuffer{}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Info, Output: buf})
	s := state.NewStore()
	c, err := New(cfg, s)
	if err != nil {
		tc.t.Fatal(err)
	}
	hs := hookSnapshots(tc.t, c)
	tc.t.Cleanup(func() { _ = c.Shutdown() })
	// Runs before the shutdown: a held snapshot would hold it.
	tc.t.Cleanup(hs.open)
	n := &node{id: id, c: c, s: s, trans: trans, dir: dir}
	for _, o := range tc.nodes {
		o.trans.Connect(trans.LocalAddr(), trans)
		trans.Connect(o.trans.LocalAddr(), o.trans)
	}
	tc.nodes = append(tc.nodes, n)
	return &hnode{node: n, store: hs, tr: ht, log: buf}
}

// freshRig is a cluster of hooked servers holding the base data and a
// snapshot of it on the leader, with a small fresh-snapshot gap.
type freshRig struct {
	t      *testing.T
	tc     *tcluster
	mod    func(*Config)
	byID   map[string]*hnode
	leader *hnode
	gap    int
}

func newFreshRig(t *testing.T, servers, gap int) *freshRig {
	t.Helper()
	r := &freshRig{t: t, tc: &tcluster{t: t}, byID: map[string]*hnode{}, gap: gap}
	r.mod = func(c *Config) {
		c.TrailingLogs = 4 // as in TestWipedFollowerGetsAFreshSnapshot
		c.FreshSnapshotEntries = uint64(gap)
		// Only the test and the fresh-snapshot rule snapshot.
		c.SnapshotThreshold = 1 << 40
	}
	first := r.tc.startHooked("s1", 1, r.mod)
	r.byID["s1"] = first
	if err := first.c.WaitForLeader(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= servers; i++ {
		n := r.tc.startHooked(fmt.Sprintf("s%d", i), 0, r.mod)
		r.byID[n.id] = n
		r.tc.join(n.node)
	}
	r.tc.waitConverged()
	r.leader = r.byID[r.tc.leader().id]
	// Features are enabled (so the snapshot fence has nothing to take
	// once the snapshot below exists).
	testutil.WaitFor(t, "features enabled", func() bool { return len(r.leader.c.EnabledFeatures()) > 0 })
	loadBase(t, r.leader.c)
	r.tc.waitConverged()
	if err := r.leader.c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	return r
}

// followers are the current followers, in ID order.
func (r *freshRig) followers() []*hnode {
	var out []*hnode
	for _, n := range r.tc.followers(r.leader.node) {
		out = append(out, r.byID[n.id])
	}
	return out
}

// wipe stops the servers ids, cut off from the others.
func (r *freshRig) wipe(ids ...string) {
	r.t.Helper()
	for _, id := range ids {
		n := r.byID[id]
		r.tc.partition(n.node)
		if err := n.c.Shutdown(); err != nil {
			r.t.Fatal(err)
		}
		r.tc.nodes = r.tc.followers(n.node)
	}
}

// write applies k entries through the leader.
func (r *freshRig) write(prefix string, k int) {
	r.t.Helper()
	for i := range k {
		mustApply(r.t, r.leader.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
			{ID: fmt.Sprintf("%s-%d", prefix, i), Namespace: "default", NodeID: "n1", JobID: "web", ClientStatus: structs.AllocRunning},
		}})
	}
}

// back starts the server id again with an empty data dir.
func (r *freshRig) back(id string) *hnode {
	r.t.Helper()
	n := r.tc.startHooked(id, 0, r.mod)
	r.byID[id] = n
	return n
}

func (r *freshRig) term(n *hnode) uint64 {
	v, _ := strconv.ParseUint(n.c.raft.Stats()["term"], 10, 64)
	return v
}

// snapshotLines is what the leader logged about snapshots.
func (r *freshRig) snapshotLines() string {
	var out []string
	for _, l := range strings.Split(r.leader.log.String(), "\n") {
		if strings.Contains(l, "starting snapshot up to") || strings.Contains(l, "fresh snapshot") || strings.Contains(l, "that needs one") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// goroutinesWith counts the goroutines whose stack holds every frame.
func goroutinesWith(frames ...string) int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		all := true
		for _, f := range frames {
			all = all && strings.Contains(g, f)
		}
		if all {
			n++
		}
	}
	return n
}

// waitInList waits until n replication goroutines are in
// freshSnapshots.List, deciding or waiting to decide on a snapshot.
func waitInList(t testing.TB, n int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d replication goroutines in the fresh-snapshot List", n), func() bool {
		return goroutinesWith("cluster.(*freshSnapshots).List(") >= n
	})
}

// Invariant attacked (bounded work, liveness (e)): at most one fresh
// snapshot per gap entries applied, also when a snapshot (an operator's,
// a scheduled one, the fence's, the one on stop) is in flight when a
// follower needs one.
//
// Found: List decides from the store's list read before it asks raft for
// a snapshot, and raft queues the request behind the one in flight
// (runSnapshots takes one at a time) and then takes it anyway: raft
// refuses a snapshot only when nothing at all was ever applied, not when
// nothing was applied since the last one. So the leader encodes its whole
// state twice in a row, the second time with nothing new (at 1,000,000
// volumes 8.5 s of CPU each, outside the servers' turns).
func TestAttackFreshSnapshotRetakenBehindASnapshotInFlight(t *testing.T) {
	r := newFreshRig(t, 3, 16)
	gone := r.followers()[1]
	r.wipe(gone.id)
	r.write("fresh", 3*r.gap)

	before := r.leader.store.creates.Load()
	release := r.leader.store.hold()
	userErr := make(chan error, 1)
	go func() { userErr <- r.leader.c.Snapshot() }() // e.g. `volhost operator raft snapshot`, or the schedule
	r.leader.store.waitEntered(t)

	r.back(gone.id)
	waitInList(t, 1)
	release()
	if err := <-userErr; err != nil {
		t.Fatal(err)
	}
	r.tc.waitConverged()

	taken := r.leader.store.creates.Load() - before
	if taken != 1 {
		t.Fatalf("the leader took %d snapshots for one user request and one follower, with nothing applied in between: "+
			"the fresh one was taken behind a snapshot already in flight, lagging it by 0 entries (gap %d)\n%s",
			taken, r.gap, r.snapshotLines())
	}
}

// Invariant attacked (bounded work, liveness (c)): two followers that
// need a snapshot at once get the same fresh snapshot, not one each.
//
// Found: each follower's replication goroutine calls List, both see the
// same lagging snapshot, both ask raft for one, and raft takes both, one
// after the other, at the same index.
func TestAttackTwoFollowersGetTwoFreshSnapshots(t *testing.T) {
	r := newFreshRig(t, 5, 16)
	fs := r.followers()
	a, b := fs[2], fs[3]
	r.wipe(a.id, b.id)
	r.write("fresh", 3*r.gap)

	before := r.leader.store.creates.Load()
	release := r.leader.store.hold()
	r.back(a.id)
	r.leader.store.waitEntered(t) // a's fresh snapshot is under way
	r.back(b.id)
	waitInList(t, 2) // a's waits for its snapshot, b's to decide
	release()
	r.tc.waitConverged()

	taken := r.leader.store.creates.Load() - before
	if taken != 1 {
		t.Fatalf("two followers needing a snapshot at once made the leader take %d full snapshots "+
			"with nothing applied between them (gap %d)\n%s", taken, r.gap, r.snapshotLines())
	}
}

// Invariant attacked (bounded work): a snapshot failure (a full disk)
// falls back to the newest snapshot and does not make the leader snapshot
// again at every replication attempt.
//
// Found: the fallback works (the follower catches up from the old
// snapshot once it can take it), but nothing remembers the failure: while
// the follower cannot take a snapshot, each retry (raft's backoff: 10 ms
// doubling to 10 s) makes the leader encode and write its whole state
// again, and fail again at the end. A leader with a full disk and a
// follower that cannot install (its disk full too, a transfer that
// breaks) spends a snapshot's CPU and disk writes every 10 s, forever.
func TestAttackFailingFreshSnapshotRetriedAtEveryAttempt(t *testing.T) {
	r := newFreshRig(t, 3, 16)
	gone := r.followers()[1]
	r.wipe(gone.id)
	r.write("fresh", 3*r.gap)

	before := r.leader.store.creates.Load()
	r.leader.store.fail.Store(true)
	r.leader.tr.setRefuse(gone.id, true)
	r.back(gone.id)
	const attempts = 6
	testutil.WaitFor(t, "replication attempts to the follower", func() bool { return r.leader.tr.installsTo(gone.id) >= attempts })
	tried := r.leader.store.creates.Load() - before
	sent := r.leader.tr.installsTo(gone.id)

	// The fallback: the follower takes the newest (old) snapshot and the
	// entries after it, while the leader's snapshots still fail.
	r.leader.tr.setRefuse(gone.id, false)
	r.tc.waitConverged()

	if tried > 1 {
		t.Fatalf("with its snapshots failing, the leader encoded and wrote its whole state %d times for %d attempts "+
			"to send one follower a snapshot, no entry applied in between (at most one per %d entries)\n%s",
			tried, sent, r.gap, r.snapshotLines())
	}
}

// Held (bounded work): a follower that cannot take a snapshot makes the
// leader take one fresh snapshot, then send that one at every attempt.
func TestAttackHeldRefusingFollowerGetsOneFreshSnapshot(t *testing.T) {
	r := newFreshRig(t, 3, 16)
	gone := r.followers()[1]
	r.wipe(gone.id)
	r.write("fresh", 3*r.gap)

	before := r.leader.store.creates.Load()
	r.leader.tr.setRefuse(gone.id, true)
	r.back(gone.id)
	testutil.WaitFor(t, "replication attempts to the follower", func() bool { return r.leader.tr.installsTo(gone.id) >= 6 })
	taken := r.leader.store.creates.Load() - before
	r.leader.tr.setRefuse(gone.id, false)
	r.tc.waitConverged()
	if taken != 1 {
		t.Fatalf("%d fresh snapshots for %d attempts, want 1\n%s", taken, r.leader.tr.installsTo(gone.id), r.snapshotLines())
	}
}

// Held (liveness): while the fresh snapshot is taken, raft keeps
// heartbeating the follower it is for (no election, it keeps its leader),
// and the other follower keeps replicating; afterwards every replica has
// the leader's digest.
func TestAttackHeldReplicationGoesOnDuringAFreshSnapshot(t *testing.T) {
	r := newFreshRig(t, 3, 16)
	fs := r.followers()
	other, gone := fs[0], fs[1]
	r.wipe(gone.id)
	r.write("fresh", 3*r.gap)

	release := r.leader.store.hold()
	back := r.back(gone.id)
	r.leader.store.waitEntered(t) // the fresh snapshot is under way
	term := r.term(r.leader)

	r.write("during", 20)
	want := r.leader.c.AppliedIndex()
	testutil.WaitFor(t, "the other follower to apply the writes", func() bool { return other.c.AppliedIndex() >= want })
	// No election for a few election timeouts: the waiting follower keeps
	// hearing from its leader.
	window := time.After(5 * testHeartbeat)
	tick := time.NewTicker(20 * time.Millisecond) // observation interval, not synchronisation
	defer tick.Stop()
	for watching := true; watching; {
		select {
		case <-window:
			watching = false
			continue
		case <-tick.C:
		}
		if !r.leader.c.IsLeader() || r.term(r.leader) != term || r.term(back) != term {
			t.Fatalf("leadership changed while the fresh snapshot ran: leader %t, term %d -> %d, follower's term %d",
				r.leader.c.IsLeader(), term, r.term(r.leader), r.term(back))
		}
		if lc := back.c.LastContact(); lc < 0 || lc > testHeartbeat {
			t.Fatalf("the follower waiting for its snapshot last heard from the leader %s ago", lc)
		}
	}
	release()
	r.tc.waitConverged()
}

// Held (liveness (a), safety): the leader hands over its leadership while
// the fresh snapshot for a follower is under way; nothing hangs, and the
// follower ends with the new leader's state.
func TestAttackHeldLeaderStepsDownDuringAFreshSnapshot(t *testing.T) {
	r := newFreshRig(t, 3, 16)
	fs := r.followers()
	heir, gone := fs[0], fs[1]
	r.wipe(gone.id)
	r.write("fresh", 3*r.gap)

	release := r.leader.store.hold()
	r.back(gone.id)
	r.leader.store.waitEntered(t)
	if err := r.leader.c.TransferLeadership(testCtx(t), heir.id); err != nil {
		t.Fatalf("transfer while the fresh snapshot runs: %v", err)
	}
	testutil.WaitFor(t, "the heir to lead", func() bool { return heir.c.IsLeader() })
	release()
	r.leader = heir
	r.write("after", 5)
	r.tc.waitConverged()
}

// Held (liveness (a), bounded work): a leader shut down while a fresh
// snapshot is under way waits for it (raft would finish it before its
// shutdown returned in any case), then takes none of its own on stop:
// the fresh one covers its log.
func TestAttackHeldShutdownDuringAFreshSnapshot(t *testing.T) {
	r := newFreshRig(t, 3, 16)
	gone := r.followers()[1]
	r.wipe(gone.id)
	r.write("fresh", 3*r.gap)
	r.leader.c.stopSnapshotMin = uint64(r.gap) // the stop would snapshot this log

	before := r.leader.store.creates.Load()
	release := r.leader.store.hold()
	r.back(gone.id)
	r.leader.store.waitEntered(t)
	sentBefore := r.leader.tr.installsTo(gone.id)
	done := make(chan error, 1)
	go func() { done <- r.leader.c.Shutdown() }()
	testutil.WaitFor(t, "the stop to wait for the snapshot in flight", func() bool {
		return goroutinesWith("cluster.(*Cluster).snapshotOnStop(", "cluster.(*snapshotGate).take(") >= 1
	})
	release()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
			t.Logf("shutdown: %v", err)
		}
	case <-time.After(testutil.Deadline):
		t.Fatal("the leader's shutdown hangs after its fresh snapshot was released")
	}
	if taken := r.leader.store.creates.Load() - before; taken != 1 {
		t.Fatalf("the leader took %d snapshots for a follower's fresh one and its stop, nothing applied between them\n%s",
			taken, r.snapshotLines())
	}
	t.Logf("InstallSnapshot RPCs the leader sent after its shutdown began: %d", r.leader.tr.installsTo(gone.id)-sentBefore)
}
