package cluster

// Red-team attacks on the snapshot gate (snapshot_gate.go) as it meets
// the snapshots raft starts itself.

import (
	"fmt"
	"io"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/internal/testutil"
)

// openHoldStore counts the snapshots raft starts and can hold Open (the
// FSM's restore of an installed snapshot opens it) until released.
type openHoldStore struct {
	raft.SnapshotStore
	creates atomic.Int64
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

func (h *openHoldStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	h.creates.Add(1)
	return h.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
}

func (h *openHoldStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	h.mu.Lock()
	g := h.gate
	h.mu.Unlock()
	if g != nil {
		h.entered <- struct{}{}
		<-g
	}
	return h.SnapshotStore.Open(id)
}

func (h *openHoldStore) hold() {
	h.mu.Lock()
	h.gate = make(chan struct{})
	h.mu.Unlock()
}

func (h *openHoldStore) release() {
	h.mu.Lock()
	g := h.gate
	h.gate = nil
	h.mu.Unlock()
	if g != nil {
		close(g)
	}
}

type openHeldNode struct {
	*node
	store *openHoldStore
}

// startOpenHeld starts a server with a data dir whose snapshot store (under
// the freshSnapshots wrapper) is an openHoldStore.
func (tc *tcluster) startOpenHeld(id string, expect int, mod func(*Config)) *openHeldNode {
	tc.t.Helper()
	_, trans := raft.NewInmemTransport(raft.ServerAddress("raft-" + id))
	dir := tc.t.TempDir()
	cfg := serverConfig(id, dir, trans, expect)
	if mod != nil {
		mod(&cfg)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Info, Output: &testutil.SyncBuffer{}})
	s := state.NewStore()
	c, err := New(cfg, s)
	if err != nil {
		tc.t.Fatal(err)
	}
	f := reflect.ValueOf(c.raft).Elem().FieldByName("snapshots")
	fresh := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(*freshSnapshots)
	h := &openHoldStore{SnapshotStore: fresh.SnapshotStore, entered: make(chan struct{}, 16)}
	fresh.SnapshotStore = h
	tc.t.Cleanup(func() { _ = c.Shutdown() })
	tc.t.Cleanup(h.release) // runs first: a held restore would hold the shutdown
	n := &node{id: id, c: c, s: s, trans: trans, dir: dir}
	for _, o := range tc.nodes {
		o.trans.Connect(trans.LocalAddr(), trans)
		trans.Connect(o.trans.LocalAddr(), o.trans)
	}
	tc.nodes = append(tc.nodes, n)
	return &openHeldNode{node: n, store: h}
}

// Invariant attacked (bounded work): every snapshot is decided after the
// one being written has ended and been recorded, "also one raft started
// itself (an install from the leader, a restore ...)": a decision then
// sees it, and no second full encode is taken at the same index.
//
// Found: the gate counts a snapshot as ended at its sink's Close, but raft
// records an installed (or restored) snapshot only after the FSM has
// restored it (installSnapshot: Close, then the restore, then
// setLastSnapshot). The window is the whole restore (seconds at 1,000,000
// volumes). A decision in it reads raft's stale last_snapshot_index:
// here a follower stopped while it restores a snapshot installed from the
// leader decides its stop snapshot from the log it had before the install
// and, once the restore is done, encodes and writes the whole installed
// state again at the install's index (its schedule turn decides the same
// way, from logsSinceSnapshot).
func TestAttackStopSnapshotsAgainBehindAnInstall(t *testing.T) {
	const gap = 16
	tc := &tcluster{t: t}
	mod := func(c *Config) {
		c.TrailingLogs = 1
		c.FreshSnapshotEntries = gap
		c.SnapshotThreshold = 1 << 40
	}
	byID := map[string]*openHeldNode{}
	first := tc.startOpenHeld("s1", 1, mod)
	byID["s1"] = first
	if err := first.c.WaitForLeader(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 3; i++ {
		n := tc.startOpenHeld(fmt.Sprintf("s%d", i), 0, mod)
		byID[n.id] = n
		tc.join(n.node)
	}
	tc.waitConverged()
	l := tc.leader()
	testutil.WaitFor(t, "features enabled", func() bool { return len(l.c.EnabledFeatures()) > 0 })
	loadBase(t, l.c)
	tc.waitConverged()
	f := byID[tc.followers(l)[0].id]
	if f.c.logsSinceSnapshot() == 0 {
		t.Fatalf("precondition: the follower's log holds no entry past its last snapshot")
	}
	f.c.stopSnapshotMin = 1 // its log is worth a snapshot on stop, as long as it is its own

	// The follower falls behind the leader's compacted log: it needs the
	// leader's snapshot.
	tc.partition(f.node)
	r := &freshRig{t: t, tc: tc, leader: &hnode{node: l}}
	r.write("behind", 3*gap)
	if err := l.c.Snapshot(); err != nil {
		t.Fatal(err)
	}

	f.store.hold()
	before := f.store.creates.Load()
	tc.heal(f.node)
	select { // the install was written and closed; its restore is under way
	case <-f.store.entered:
	case <-time.After(testutil.Deadline):
		t.Fatal("the follower never restored an installed snapshot")
	}
	installs := f.store.creates.Load() - before

	done := make(chan error, 1)
	go func() { done <- f.c.Shutdown() }()
	decided := false
	testutil.WaitFor(t, "the stop to decide", func() bool {
		decided = goroutinesWith("cluster.(*Cluster).snapshotOnStop(", "raft.(*deferError).Error(") >= 1
		// Or the stop decided not to and waits for raft to stop, behind
		// the held restore.
		return decided || goroutinesWith("cluster.(*Cluster).Shutdown(", "raft.(*shutdownFuture).Error(") >= 1
	})
	f.store.release()
	select {
	case <-done:
	case <-time.After(testutil.Deadline):
		t.Fatal("the follower's shutdown hangs after its restore was released")
	}
	taken := f.store.creates.Load() - before - installs
	if installs != 1 || taken != 0 {
		t.Fatalf("a follower stopped while restoring the snapshot installed from its leader took %d full snapshot(s) of its own "+
			"(decided to: %t) behind %d install(s), at the index it had just installed: the gate let the stop decide once the "+
			"install's sink closed, before raft recorded the snapshot (last_snapshot_index read stale)", taken, decided, installs)
	}
}
