package cluster

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// A server stopped with enough entries past its last snapshot snapshots as
// it stops: restarted, it restores that snapshot, at its last applied
// entry, and has nothing of its own left to replay; the state is the same.
// Below the minimum it does not.
func TestServerSnapshotsOnStop(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Server: true, BootstrapExpect: 1, NodeID: "s1", BindAddr: freeAddr(t),
		SnapshotInterval: snapshotTimerOff, SnapshotThreshold: 1 << 20}
	c, _ := start(t, cfg)
	events := func(n int) {
		for i := range n {
			mustApply(t, c, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint(i)}}})
		}
	}
	events(3)
	c.stopSnapshotMin = c.logsSinceSnapshot() + 1
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	c, s2 := start(t, cfg)
	if got := lastSnapshotIndex(c); got != 0 {
		t.Fatalf("a stop below the minimum took a snapshot (at %d)", got)
	}
	c.stopSnapshotMin = 10
	events(12)
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Read after the stop: the leader's own entries (its no-op, its
	// bookkeeping) may land after the test's last one, and the stop must
	// cover them too.
	want, applied := digest(t, s2), c.raft.AppliedIndex()
	snaps, err := raft.NewFileSnapshotStore(dir+"/raft", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("no snapshot after a stop 12 entries past none: %v", err)
	}
	if list[0].Index != applied {
		t.Fatalf("the stop's snapshot is at %d, the last applied entry %d", list[0].Index, applied)
	}
	c, s := start(t, cfg)
	if got := lastSnapshotIndex(c); got != applied {
		t.Fatalf("restarted from the snapshot at %d, want %d", got, applied)
	}
	if got := digest(t, s); got != want {
		t.Fatal("the state restored from the stop's snapshot differs from the one stopped")
	}
}

// A configuration change as the log's last entry (a server joined, nothing
// written since) does not keep a stopping server from its snapshot: raft
// counts the change as applied by the FSM, so the snapshot covers it.
func TestServerSnapshotsOnStopAfterAConfigurationChange(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Server: true, BootstrapExpect: 1, NodeID: "s1", BindAddr: freeAddr(t),
		SnapshotInterval: snapshotTimerOff, SnapshotThreshold: 1 << 20}
	c, _ := start(t, cfg)
	for i := range 12 {
		mustApply(t, c, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint(i)}}})
	}
	c.stopSnapshotMin = 10
	// A non-voter nobody runs: the one voter commits the change alone.
	if err := c.raft.AddNonvoter("ghost", raft.ServerAddress(freeAddr(t)), 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	// Not a barrier, which raft counts as applied by the FSM: the change
	// is the last entry.
	last := c.raft.LastIndex()
	testutil.WaitFor(t, "the configuration change applied", func() bool { return c.raft.AppliedIndex() >= last })
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir+"/raft", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("no snapshot on a stop right after a configuration change: %v", err)
	}
	if list[0].Index < last {
		t.Fatalf("the stop's snapshot is at %d, before the configuration change at %d", list[0].Index, last)
	}
}
