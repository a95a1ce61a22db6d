package cluster

// The held snapshot send (reach_transport.go) and the rule that the leader
// takes no fresh snapshot while a peer is unreachable (snapshot_fresh.go),
// attacked. Invariants:
//   - a wiped follower that comes back still gets a fresh snapshot (when
//     no other peer is down);
//   - no unbounded snapshot work;
//   - shutdown is not delayed by a held snapshot send.

import (
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

const attack2Gap = 16

// heldSnapshotLeader is a single-server leader with a non-voter at addr
// that nobody runs (a wiped follower, down), its log compacted past it
// and 3 gaps of entries applied since its newest snapshot, once raft's
// snapshot to it is held in the reach transport. It returns the leader
// and the index of its newest snapshot.
func heldSnapshotLeader(t *testing.T, addr string) (*Cluster, uint64) {
	t.Helper()
	c, _ := start(t, Config{DataDir: t.TempDir(), Server: true, BootstrapExpect: 1, NodeID: "s1", BindAddr: freeAddr(t),
		SnapshotInterval: snapshotTimerOff, SnapshotThreshold: 1 << 40, FreshSnapshotEntries: attack2Gap, TrailingLogs: 4})
	// The first append to the follower gives up after this, so raft moves
	// on to the snapshot, which is then held as long (set before the
	// follower exists: nothing reads it yet).
	c.reach.max = 3 * time.Second
	events := func(n int) {
		for i := range n {
			mustApply(t, c, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint(i)}}})
		}
	}
	if err := c.raft.AddNonvoter("wiped", raft.ServerAddress(addr), 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	events(10)
	if err := c.Snapshot(); err != nil { // compacts the log past the follower
		t.Fatal(err)
	}
	taken := lastSnapshotIndex(c)
	events(3 * attack2Gap)
	testutil.WaitFor(t, "the leader's snapshot to the down follower, held in the transport", func() bool {
		return goroutinesWith("(*Raft).sendLatestSnapshot(", "(*reachTransport).held(") > 0
	})
	return c, taken
}

// Invariant: a wiped follower that comes back gets a fresh snapshot when
// no other peer is down. Found: raft picks the snapshot (List) before it
// dials; while the follower is down List sends the newest as it is (a
// peer is unreachable: the follower itself), and the send is then held in
// the transport until the follower accepts a connection. The follower
// that comes back within reachWaitMax (30 s) is therefore sent the
// snapshot picked while it was away, however far it lags (here 3 gaps of
// entries, at scale a whole schedule period: TestScaleCluster's 12,400
// entries, 5.5 s of its 8.3 s rejoin), the very tail freshSnapshots exists
// to cut; no other peer was ever down. Now a held send whose snapshot has
// gone stale is given back to raft once the follower accepts connections,
// and raft picks again, a fresh one.
func TestReturningFollowerIsSentAFreshSnapshotNotTheHeldOne(t *testing.T) {
	addr := freeAddr(t)
	c, taken := heldSnapshotLeader(t, addr)
	// The follower comes back, empty, at its address.
	var installed atomic.Uint64
	follower, err := raft.NewTCPTransport(addr, nil, 2, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follower.Close() })
	back := c.AppliedIndex()
	go func() {
		for rpc := range follower.Consumer() {
			switch req := rpc.Command.(type) {
			case *raft.InstallSnapshotRequest:
				if _, err := io.Copy(io.Discard, rpc.Reader); err != nil {
					rpc.Respond(nil, err)
					continue
				}
				installed.CompareAndSwap(0, req.LastLogIndex)
				rpc.Respond(&raft.InstallSnapshotResponse{Term: req.Term, Success: true}, nil)
			case *raft.AppendEntriesRequest:
				last := req.PrevLogEntry + uint64(len(req.Entries))
				rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, LastLog: last, Success: installed.Load() > 0}, nil)
			default:
				rpc.Respond(nil, fmt.Errorf("not served here"))
			}
		}
	}()
	testutil.WaitFor(t, "the returned follower to be sent a snapshot", func() bool { return installed.Load() > 0 })
	got := installed.Load()
	if got+attack2Gap <= back {
		t.Fatalf("the follower that came back was sent the snapshot at %d, %d entries behind the leader's applied %d when it returned "+
			"(the newest, %d, picked while it was down and held in the transport): want a fresh one, less than the gap of %d behind; "+
			"no other peer was down", got, back-got, back, taken, attack2Gap)
	}
}

// Invariant: shutdown is not delayed by a held snapshot send. A leader
// whose snapshot to a down follower is held in the transport (for up to
// reach.max, here 3 s; 30 s in production) stops within a second.
func TestShutdownIsNotHeldByASnapshotSend(t *testing.T) {
	c, _ := heldSnapshotLeader(t, freeAddr(t))
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Shutdown() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown still waiting 10 s after it began, behind the held snapshot send")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("shutdown took %s with a snapshot send held in the transport", d)
	}
	if n := goroutinesWith("(*reachTransport).held("); n != 0 {
		t.Fatalf("%d held sends outlived the shutdown", n)
	}
}
