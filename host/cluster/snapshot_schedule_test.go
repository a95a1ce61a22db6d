package cluster

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// At no instant of a period may two servers' slots be open, and every
// server gets half of its slot: the schedule that keeps the servers of a
// cluster from snapshotting all at once.
func TestSnapshotSlotsNeverOverlap(t *testing.T) {
	period := 120 * time.Second
	base := time.Unix(1_800_000_000, 0)
	for n := 1; n <= 5; n++ {
		open := make([]time.Duration, n)
		const step = 50 * time.Millisecond
		for off := time.Duration(0); off < 2*period; off += step {
			now := base.Add(off)
			k := 0
			for r := range n {
				if inSnapshotSlot(now, period, r, n) {
					k++
					open[r] += step
				}
			}
			if k > 1 {
				t.Fatalf("n=%d at %s: %d servers may snapshot", n, now, k)
			}
		}
		want := period / time.Duration(n) // half a slot in each of two periods
		for r, d := range open {
			if d < want-time.Second || d > want+time.Second {
				t.Fatalf("n=%d rank %d: open %s over two periods, want about %s", n, r, d, want)
			}
		}
	}
	if inSnapshotSlot(base, period, -1, 3) || inSnapshotSlot(base, period, 3, 3) || inSnapshotSlot(base, 0, 0, 1) {
		t.Fatal("a server outside the configuration (or no period) was given a slot")
	}
}

// A server takes one turn per period, however often it passes the
// threshold within its half slot (raft's own timer takes one snapshot
// per interval); a turn whose snapshot failed stays open until it is had
// or the half slot ends.
func TestSnapshotTurnsOncePerPeriod(t *testing.T) {
	period := 300 * time.Second
	base := time.Unix(1_800_000_000, 0).Truncate(period)
	const step = 250 * time.Millisecond
	for n := 1; n <= 5; n++ {
		for r := range n {
			turns := &snapshotTurns{period: period}
			taken := map[int64]int{}
			failed := 0
			for off := time.Duration(0); off < 3*period; off += step {
				now := base.Add(off)
				if !turns.open(now, r, n) {
					continue
				}
				if !turns.claim(now, r, n) {
					t.Fatalf("n=%d rank %d at %s: an open turn not claimed", n, r, now)
				}
				if failed < 3 { // the first three snapshots fail: the turn is given back
					failed++
					turns.giveBack(now)
					continue
				}
				taken[now.UnixNano()/int64(period)]++
			}
			if len(taken) != 3 {
				t.Fatalf("n=%d rank %d: turns in %d of 3 periods (%v)", n, r, len(taken), taken)
			}
			for p, k := range taken {
				if k != 1 {
					t.Fatalf("n=%d rank %d: %d snapshots in period %d, want 1", n, r, k, p)
				}
			}
		}
	}
}

// The rank is the server's place among the configuration's IDs in order,
// the same on every server whatever order raft lists them in.
func TestSnapshotRank(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{{ID: "s3"}, {ID: "s1"}, {ID: "s2"}}}
	for id, want := range map[raft.ServerID]int{"s1": 0, "s2": 1, "s3": 2, "s4": -1} {
		if r, n := snapshotRank(conf, id); r != want || n != 3 {
			t.Fatalf("%s: rank %d of %d, want %d of 3", id, r, n, want)
		}
	}
}

// A server's snapshots come from the schedule (raft's own timer is off):
// past the threshold, it snapshots in its slot.
func TestSnapshotScheduleTakesSnapshots(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Server: true, BootstrapExpect: 1, NodeID: "s1",
		SnapshotInterval: 200 * time.Millisecond, SnapshotThreshold: 4}
	c, _ := start(t, cfg)
	if got := c.raft.ReloadableConfig().SnapshotInterval; got != snapshotTimerOff {
		t.Fatalf("raft's own snapshot interval %s: its timer would run beside the schedule", got)
	}
	for i := range 8 {
		mustApply(t, c, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint(i)}}})
	}
	testutil.WaitFor(t, "the schedule's snapshots to leave fewer entries than the threshold", func() bool {
		return lastSnapshotIndex(c) > 0 && c.logsSinceSnapshot() < cfg.SnapshotThreshold
	})
}

// A server whose newest configuration entry is not applied yet (catching
// up after a restart) does not ask raft for a snapshot, which raft would
// refuse with an error in the log; one that has applied it is not held
// back.
func TestSnapshotScheduleWaitsForConfiguration(t *testing.T) {
	for _, c := range []struct {
		conf, applied uint64
		pending       bool
	}{{24097, 24000, true}, {24097, 24097, false}, {24097, 25000, false}, {0, 0, false}} {
		if got := configPendingAt(c.conf, c.applied); got != c.pending {
			t.Errorf("configuration at %d, applied %d: pending %v, want %v", c.conf, c.applied, got, c.pending)
		}
	}
}

// lastConfigurationEntry scans the log store for its newest configuration
// entry: what raft itself scans at start-up.
// lastSnapshotIndex is raft's own record of the server's newest snapshot
// (0: none).
func lastSnapshotIndex(c *Cluster) uint64 {
	n, _ := strconv.ParseUint(c.raft.Stats()["last_snapshot_index"], 10, 64)
	return n
}

func lastConfigurationEntry(t *testing.T, logs raft.LogStore) uint64 {
	t.Helper()
	first, err1 := logs.FirstIndex()
	last, err2 := logs.LastIndex()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	var found uint64
	for i := max(first, 1); i <= last; i++ {
		var e raft.Log
		if err := logs.GetLog(i, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == raft.LogConfiguration {
			found = i
		}
	}
	return found
}

// The guard compares against the index of the newest configuration entry
// in the log, on every server, after joins and after a restart (raft's
// Stats reports it as 0 in raft v1.8, so a guard reading it never held a
// snapshot back), and holds one back while the state machine is behind it.
func TestConfigPendingKnowsTheConfigurationEntry(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	tc := newCluster(t, 3, dirs...)
	l := tc.leader()
	mustApply(t, l.c, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: "after the joins"}}})
	tc.waitConverged()
	check := func(n *node) uint64 {
		t.Helper()
		want := lastConfigurationEntry(t, n.c.logs)
		if want < 2 { // the bootstrap's entry, then a join's
			t.Fatalf("%s: newest configuration entry at %d, want a join's", n.id, want)
		}
		testutil.WaitFor(t, n.id+" to note its newest configuration entry and apply it", func() bool {
			return n.c.configs.latestConfiguration() == want && !n.c.configPending()
		})
		return want
	}
	for _, n := range tc.nodes {
		conf := check(n)
		// A state machine behind that entry: the guard holds off (set
		// again until seen: an entry applied in between moves it on).
		testutil.WaitFor(t, n.id+" behind its configuration entry to hold off", func() bool {
			n.c.fsm.position.Store(conf - 1)
			return n.c.configPending()
		})
	}
	for _, n := range tc.nodes {
		if err := n.c.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	// After a restart the index comes from raft's own scan of the log.
	tc2 := &tcluster{t: t}
	for i, n := range tc.nodes {
		tc2.newNode(n.id, dirs[i], 0)
	}
	tc2.waitConverged()
	for _, n := range tc2.nodes {
		check(n)
	}
}
