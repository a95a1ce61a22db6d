package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// A wiped follower is sent a snapshot of the leader's state as it is, not
// the leader's last scheduled one followed by every entry since: the
// entries after the snapshot it installs are at most the fresh-snapshot
// gap.
func TestWipedFollowerGetsAFreshSnapshot(t *testing.T) {
	const gap = 16
	for _, tc := range []struct {
		name     string
		gap      uint64
		wantNew  bool
		appended int
	}{
		{"lagging snapshot replaced", gap, true, 3 * gap},
		{"recent snapshot kept", gap, false, gap / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := func(c *Config) {
				// A few entries kept past the snapshot: a follower whose
				// last acknowledgement the leader had not yet read when
				// it snapshotted must not need a snapshot itself (CI saw
				// one lag by one and the leader snapshot for it while it
				// was away).
				c.TrailingLogs = 4
				c.FreshSnapshotEntries = tc.gap
				// The schedule never snapshots by itself here: only
				// the test and the fresh-snapshot rule do.
				c.SnapshotThreshold = 1 << 40
			}
			cl := &tcluster{t: t}
			first := cl.newNodeWith("s1", 1, mod)
			if err := first.c.WaitForLeader(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"s2", "s3"} {
				cl.join(cl.newNodeWith(id, 0, mod))
			}
			cl.waitConverged()
			l := cl.leader()
			loadBase(t, l.c)
			cl.waitConverged()
			if err := l.c.Snapshot(); err != nil {
				t.Fatal(err)
			}
			old := snapshotIndex(t, l.c)

			// s3 goes away, writes go on, s3 comes back empty.
			followers := cl.followers(l)
			gone := followers[len(followers)-1]
			cl.partition(gone)
			if err := gone.c.Shutdown(); err != nil {
				t.Fatal(err)
			}
			for i := range tc.appended {
				mustApply(t, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
					{ID: fmt.Sprintf("fresh-%d", i), Namespace: "default", NodeID: "n1", JobID: "web", ClientStatus: structs.AllocRunning},
				}})
			}
			// The leader may have taken fresh snapshots already while s3
			// was away (its replication asks for one when it gives up on
			// the log): the rule is judged against the state s3 comes
			// back to, not against the snapshot before the writes.
			applied := l.c.AppliedIndex()
			cl.nodes = cl.followers(gone)
			back := cl.newNodeWith(gone.id, 0, mod)
			cl.waitConverged()

			got := snapshotIndex(t, back.c)
			if got < old {
				t.Fatalf("the rejoined follower installed snapshot %d, older than the leader's %d", got, old)
			}
			if !tc.wantNew {
				if got != old {
					t.Fatalf("installed snapshot %d, want the leader's %d kept: it lagged by %d of a gap of %d",
						got, old, applied-old, tc.gap)
				}
				return
			}
			if got == old || got+tc.gap <= applied {
				t.Fatalf("installed snapshot %d (leader's before the writes %d), %d entries behind the leader's applied %d: want a fresh one, less than the gap of %d behind",
					got, old, applied-min(got, applied), applied, tc.gap)
			}
		})
	}
}

func snapshotIndex(t *testing.T, c *Cluster) uint64 {
	t.Helper()
	var idx uint64
	testutil.WaitFor(t, "a snapshot index", func() bool {
		idx = lastSnapshotIndex(c)
		return idx > 0
	})
	return idx
}

// A follower that is down gets no fresh snapshot. raft reads the store's
// List before it dials, so the leader encoded its whole state for a
// follower it then could not reach, and again at its next attempt once a
// gap of entries was applied, for as long as the follower stayed away.
// Here the follower is a non-voter nobody runs, on a real TCP transport,
// behind a compacted log: the leader sends it the snapshot it has, and
// the send waits for the follower in the transport instead.
func TestNoFreshSnapshotForAnUnreachableFollower(t *testing.T) {
	const gap = 16
	c, _ := start(t, Config{DataDir: t.TempDir(), Server: true, BootstrapExpect: 1, NodeID: "s1", BindAddr: freeAddr(t),
		SnapshotInterval: snapshotTimerOff, SnapshotThreshold: 1 << 40, FreshSnapshotEntries: gap, TrailingLogs: 4})
	// Appends to the follower give up soon, so raft moves on to the
	// snapshot (set before the follower exists: nothing reads it yet).
	c.reach.max = 100 * time.Millisecond
	events := func(n int) {
		for i := range n {
			mustApply(t, c, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint(i)}}})
		}
	}
	if err := c.raft.AddNonvoter("ghost", raft.ServerAddress(freeAddr(t)), 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	events(10)
	if err := c.Snapshot(); err != nil { // compacts the log past the follower
		t.Fatal(err)
	}
	taken := lastSnapshotIndex(c)
	events(3 * gap)
	testutil.WaitFor(t, "the leader sending the unreachable follower a snapshot, held in the transport", func() bool {
		return goroutinesWith("(*Raft).sendLatestSnapshot(", "(*reachTransport).held(") > 0
	})
	if got := lastSnapshotIndex(c); got != taken {
		t.Fatalf("the leader took a snapshot at %d (the last one was at %d) for a follower it cannot reach", got, taken)
	}
	if !c.reach.unreachable() {
		t.Fatal("the follower is not counted unreachable")
	}
}
