package cluster

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// Attacks on configLog and configPending (config_log.go,
// snapshot_schedule.go): the guard that keeps a server from asking raft
// for a snapshot while raft would refuse it. Every verdict is raft's own
// (its Snapshot's answer, its log store, its snapshot files), not the
// guard's view of itself.

const (
	attackThreshold = 16
	// attackTail is how many entries the partitioned leader appends
	// before its configuration entry: the length of the tail the new
	// leader's log deletes from it.
	attackTail = 400
)

// holdsWithin polls cond every few milliseconds until it holds or d has
// passed, and reports whether it held (a wait-for with a deadline that
// lets the caller gather raft's verdict before failing).
func holdsWithin(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-tick.C:
		}
	}
	return true
}

func attackEvent(i int) *structs.EventAppendRequest {
	return &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint("attack ", i)}}}
}

// isConfigRefusal is raft's refusal of a snapshot below a committed
// configuration entry (raft v1.8 snapshot.go).
func isConfigRefusal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "cannot take snapshot now, wait until the configuration entry")
}

// truncatedConfig is a three-server cluster whose old leader (s1) wrote
// a configuration entry, at the end of a long tail of entries, while cut
// off from the others, and had that tail deleted by the new leader when
// it came back. noted is the index of that deleted configuration entry.
type truncatedConfig struct {
	tc     *tcluster
	old    *node // s1, the old leader
	leader *node // the new leader
	noted  uint64
}

// newTruncatedConfig builds it. s1 keeps its data in dir1 ("" in memory).
// s1's lease is long (3 s) so that, cut off, it goes on appending for a
// moment, as a leader under load does for up to its lease; the others
// keep short timings so they elect a new leader meanwhile. (With 1 s, on
// a machine busy with other tests, s1 stepped down before its tail was
// written.)
func newTruncatedConfig(t *testing.T, dir1 string) *truncatedConfig {
	t.Helper()
	snaps := func(c *Config) {
		c.SnapshotThreshold = attackThreshold
		c.SnapshotInterval = 600 * time.Millisecond
		c.FreshSnapshotEntries = 1 << 40 // the leader sends its newest snapshot as is
	}
	oldLeader := func(c *Config) {
		snaps(c)
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, 3*time.Second
	}
	others := func(c *Config) {
		snaps(c)
		c.HeartbeatTimeout, c.ElectionTimeout = 500*time.Millisecond, 500*time.Millisecond
	}
	tc := &tcluster{t: t}
	s1 := tc.start("s1", dir1, 1, oldLeader)
	if err := s1.c.WaitForLeader(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	s2 := tc.start("s2", "", 0, others)
	tc.join(s2)
	s3 := tc.start("s3", "", 0, others)
	tc.join(s3)
	tc.waitConverged()
	if l := tc.leader(); l != s1 {
		t.Fatalf("setup: %s leads, want s1", l.id)
	}
	for i := range 4 {
		mustApply(t, s1.c, structs.EventAppendType, attackEvent(i))
	}
	tc.waitConverged()

	// Cut s1 off; it still believes it leads for up to its lease. It
	// appends a tail of commands and, last, a configuration entry (an
	// operator's add, a join reaching it): none of it can commit.
	tc.partition(s1)
	before := s1.c.raft.LastIndex()
	data, err := encodeCommand(structs.EventAppendType, time.Now(), attackEvent(-1))
	if err != nil {
		t.Fatal(err)
	}
	for range attackTail {
		s1.c.raft.Apply(data, time.Second)
	}
	cf := s1.c.raft.AddNonvoter("ghost", "raft-ghost", 0, time.Second)
	if err := cf.Error(); err == nil {
		t.Fatal("setup: a configuration entry of a cut-off leader committed")
	}
	noted := s1.c.configs.latestConfiguration()
	if noted <= before+attackTail/2 {
		t.Fatalf("setup: s1 stepped down before writing its tail (configuration noted at %d, log at %d before the tail)", noted, before)
	}
	if got := lastConfigurationEntry(t, s1.c.logs); got != noted {
		t.Fatalf("setup: s1's log holds its newest configuration entry at %d, noted %d", got, noted)
	}

	// The others elect a leader and go on; s1 comes back and its tail,
	// the configuration entry with it, is deleted.
	nl := tc.leader(s2, s3)
	tc.heal(s1)
	for i := range 4 * attackThreshold {
		mustApply(t, nl.c, structs.EventAppendType, attackEvent(100+i))
	}
	tc.waitConverged()
	if got := lastConfigurationEntry(t, s1.c.logs); got >= noted {
		t.Fatalf("setup: s1's log still holds a configuration entry at %d (noted %d): its tail was not deleted", got, noted)
	}
	if nl.c.LastIndex() >= noted {
		t.Fatalf("setup: the new leader's log reached %d, past the deleted entry at %d", nl.c.LastIndex(), noted)
	}
	return &truncatedConfig{tc: tc, old: s1, leader: nl, noted: noted}
}

// Invariant 1 (liveness), through the schedule. A configuration entry the
// old leader wrote while cut off is deleted from its log when it rejoins
// (raft's DeleteRange, which configLog does not see). Its noted index
// stays, so configPending stays true, with nothing left to apply, until
// the cluster's log grows past the deleted entry's index: as many entries
// as the deleted tail held, which no setting bounds (not the snapshot
// threshold, not the trailing logs). Meanwhile raft would take the
// snapshot at once, and the server's log grows past its threshold
// without one.
func TestConfigLogAttackDeletedConfigurationHoldsScheduledSnapshots(t *testing.T) {
	x := newTruncatedConfig(t, "")
	s1 := x.old
	snapAt := lastSnapshotIndex(s1.c)
	applied := s1.c.AppliedIndex()
	// The schedule (s1's slot comes every 600 ms) snapshots once the log
	// holds the threshold past the last snapshot and raft would take it,
	// so the log never stays that long: the setup wrote 4 x threshold
	// entries after the deleted tail, and the schedule may have taken its
	// snapshot already while the setup waited for the servers to converge.
	if holdsWithin(15*time.Second, func() bool { return s1.c.logsSinceSnapshot() < attackThreshold }) {
		return
	}
	pending := s1.c.configPending()
	logLast, _ := s1.c.logs.LastIndex()
	inLog := lastConfigurationEntry(t, s1.c.logs)
	since := s1.c.logsSinceSnapshot()
	// Raft's own verdict: asked directly, does it take the snapshot?
	err := s1.c.raft.Snapshot().Error()
	t.Fatalf("s1 applied everything (applied %d, log last %d, newest configuration entry in its log at %d) and holds %d entries past its snapshot at %d "+
		"(threshold %d), yet its schedule took no snapshot in 15 s: configPending=%v, noted configuration %d (deleted from the log), position %d; "+
		"raft asked directly: err=%v (nil: raft takes it), last_snapshot_index now %d; the hold lasts until the cluster's log reaches %d (leader at %d)",
		applied, logLast, inLog, since, snapAt, attackThreshold, pending, x.noted, s1.c.fsm.position.Load(),
		err, lastSnapshotIndex(s1.c), x.noted, x.leader.c.LastIndex())
}

// Invariant 1 (liveness), through the snapshot on stop: the same deleted
// configuration entry keeps a server stopped on purpose from its snapshot
// (snapshot_stop.go), judged by the snapshot files on its disk: the
// restart replays its log instead.
func TestConfigLogAttackDeletedConfigurationSkipsStopSnapshot(t *testing.T) {
	dir := t.TempDir()
	x := newTruncatedConfig(t, dir)
	s1 := x.old
	for i := range 8 {
		mustApply(t, x.leader.c, structs.EventAppendType, attackEvent(1000+i))
	}
	x.tc.waitConverged()
	pending := s1.c.configPending()
	s1.c.stopSnapshotMin = 1
	applied := s1.c.AppliedIndex()
	if err := s1.c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	store, err := raft.NewFileSnapshotStore(filepath.Join(dir, "raft"), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var newest uint64
	if len(list) > 0 {
		newest = list[0].Index
	}
	if newest < applied {
		t.Fatalf("s1 stopped with everything applied (at %d, log past its snapshot by far) but its newest snapshot on disk is at %d: "+
			"the stop skipped its snapshot (configPending=%v before the stop, noted configuration %d, deleted from its log)",
			applied, newest, pending, x.noted)
	}
}

// Invariant 2 and 1 across a server's life: whenever the guard says no
// configuration is pending, raft must not refuse the snapshot with its
// configuration error; and once everything is applied, the guard must not
// hold back a snapshot raft takes. Checked on every server after joins,
// a configuration change with no command after it, an operator restore,
// a follower catching up from an installed snapshot, a removal and
// re-addition, and a restart of the whole cluster.
func TestConfigLogAttackGuardAgreesWithRaftThroughALife(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	mod := func(c *Config) {
		c.SnapshotThreshold = 1 << 30 // only this test's snapshots
		c.TrailingLogs = 4
		c.FreshSnapshotEntries = 1 << 40
		// One leader throughout (the test drives it by hand): with the
		// tests' short lease, a machine busy with other tests stalled
		// its heartbeats and it stepped down mid-way.
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	}
	tc := &tcluster{t: t}
	tc.start("s1", dirs[0], 1, mod)
	if err := tc.nodes[0].c.WaitForLeader(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	tc.join(tc.start("s2", dirs[1], 0, mod))
	tc.join(tc.start("s3", dirs[2], 0, mod))
	tc.waitConverged()

	check := func(stage string, nodes []*node) {
		t.Helper()
		for _, n := range nodes {
			// Everything is applied: the guard lets go.
			if !holdsWithin(10*time.Second, func() bool { return !n.c.configPending() }) {
				err := n.c.raft.Snapshot().Error()
				t.Errorf("%s: %s applied everything but configPending stays true (noted %d, position %d, applied %d, log's newest configuration entry %d); raft asked directly: %v",
					stage, n.id, n.c.configs.latestConfiguration(), n.c.fsm.position.Load(), n.c.AppliedIndex(), lastConfigurationEntry(t, n.c.logs), err)
				continue
			}
			if err := n.c.raft.Snapshot().Error(); isConfigRefusal(err) {
				t.Errorf("%s: %s: configPending false but raft refused: %v (noted %d, position %d)",
					stage, n.id, err, n.c.configs.latestConfiguration(), n.c.fsm.position.Load())
			}
		}
	}
	l := tc.leader()
	for i := range 3 {
		mustApply(t, l.c, structs.EventAppendType, attackEvent(i))
	}
	tc.waitConverged()
	check("after the joins", tc.nodes)

	// A configuration change as the last entry (nothing written after).
	if err := l.c.raft.AddNonvoter("ghost", "raft-ghost", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if err := l.c.raft.RemoveServer("ghost", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	tc.waitConverged()
	check("after a configuration change with no command after it", tc.nodes)

	// An operator restore of a saved snapshot.
	var buf bytes.Buffer
	if err := l.c.SaveSnapshot(testCtx(t), &buf); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustApply(t, l.c, structs.EventAppendType, attackEvent(10+i))
	}
	if err := l.c.RestoreSnapshot(testCtx(t), bytes.NewReader(buf.Bytes()), RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitConverged()
	check("after an operator restore", tc.nodes)

	// A follower cut off while the others change the configuration and
	// compact their logs past it: it catches up from an installed snapshot.
	f := tc.followers(l)[0]
	tc.partition(f)
	if err := l.c.raft.AddNonvoter("ghost2", "raft-ghost2", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		mustApply(t, l.c, structs.EventAppendType, attackEvent(20+i))
	}
	if err := l.c.raft.RemoveServer("ghost2", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		mustApply(t, l.c, structs.EventAppendType, attackEvent(40+i))
	}
	if err := l.c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	leaderSnap := lastSnapshotIndex(l.c)
	if first, _ := l.c.logs.FirstIndex(); first <= f.c.LastIndex() {
		t.Fatalf("setup: the leader's log starts at %d, the cut-off follower's ends at %d: no install", first, f.c.LastIndex())
	}
	tc.heal(f)
	tc.waitConverged()
	if got := lastSnapshotIndex(f.c); got < leaderSnap {
		t.Fatalf("setup: %s caught up without installing the leader's snapshot at %d (its last snapshot %d)", f.id, leaderSnap, got)
	}
	check("after a follower installed a snapshot", tc.nodes)

	// A server removed, then added again (it keeps running meanwhile).
	r := tc.followers(l)[1]
	if err := l.c.RemovePeer(testCtx(t), r.id); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		mustApply(t, l.c, structs.EventAppendType, attackEvent(60+i))
	}
	tc.join(r)
	tc.waitConverged()
	check("after a removal and re-addition", tc.nodes)

	// A restart of every server.
	for _, n := range tc.nodes {
		if err := n.c.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	tc2 := &tcluster{t: t}
	for i, n := range tc.nodes {
		tc2.start(n.id, dirs[i], 0, mod)
	}
	tc2.waitConverged()
	check("after a restart", tc2.nodes)
}

// Invariant 3: notes from appends and from reads running at once keep
// the newest configuration index (a lost update would lower it and let a
// snapshot through that raft refuses).
func TestConfigLogAttackConcurrentNotesKeepTheNewest(t *testing.T) {
	for round := range 20 {
		l := newConfigLog(raft.NewInmemStore())
		const writers, per = 8, 64
		// Entries 1..writers*per; every 7th a configuration entry.
		var newest uint64
		for i := uint64(1); i <= writers*per; i++ {
			if i%7 == 0 {
				newest = i
			}
		}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var es []*raft.Log
				for j := range per {
					i := uint64(w*per + j + 1)
					typ := raft.LogCommand
					if i%7 == 0 {
						typ = raft.LogConfiguration
					}
					es = append(es, &raft.Log{Index: i, Type: typ})
				}
				if err := l.StoreLogs(es); err != nil {
					t.Error(err)
				}
				for _, e := range es {
					var got raft.Log
					_ = l.GetLog(e.Index, &got)
				}
			}()
		}
		wg.Wait()
		if got := l.latestConfiguration(); got != newest {
			t.Fatalf("round %d: newest configuration noted %d, want %d", round, got, newest)
		}
	}
}

// What a DeleteRange leaves noted: the newest configuration entry still in
// the log, whichever end the range cut (a follower's conflicting tail, the
// compaction of the head), and everything when the store failed to delete.
func TestConfigLogForgetsDeletedEntries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ranges [][2]uint64
		fail   bool
		want   uint64
	}{
		{"nothing deleted", nil, false, 20},
		{"the tail with the newest", [][2]uint64{{15, 25}}, false, 10},
		{"the head", [][2]uint64{{1, 5}}, false, 20},
		{"the tail, then the head past the rest", [][2]uint64{{15, 25}, {1, 12}}, false, 0},
		{"a range between", [][2]uint64{{8, 12}}, false, 20},
		{"the store failed", [][2]uint64{{15, 25}}, true, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &failingDeletes{LogStore: raft.NewInmemStore(), fail: tc.fail}
			l := newConfigLog(store)
			for i := uint64(1); i <= 25; i++ {
				typ := raft.LogCommand
				if i == 3 || i == 10 || i == 20 {
					typ = raft.LogConfiguration
				}
				if err := l.StoreLog(&raft.Log{Index: i, Type: typ}); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range tc.ranges {
				if err := l.DeleteRange(r[0], r[1]); (err != nil) != tc.fail {
					t.Fatalf("DeleteRange(%d, %d) = %v", r[0], r[1], err)
				}
			}
			if got := l.latestConfiguration(); got != tc.want {
				t.Fatalf("newest configuration entry noted at %d, want %d", got, tc.want)
			}
		})
	}
}

// failingDeletes is a log store whose DeleteRange fails when fail is set.
type failingDeletes struct {
	raft.LogStore
	fail bool
}

func (f *failingDeletes) DeleteRange(lo, hi uint64) error {
	if f.fail {
		return fmt.Errorf("injected: delete %d-%d failed", lo, hi)
	}
	return f.LogStore.DeleteRange(lo, hi)
}
