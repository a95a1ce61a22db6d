package cluster

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// A restarted server restores its last snapshot, then applies every entry
// of its log after it before it has caught up: up to
// raft_snapshot_threshold entries and more (the turns of
// snapshot_schedule.go wait for a slot). In TestScaleCluster at 200,000
// volumes a follower stopped 7,900 entries past its last snapshot spent 10
// of its 25 s to caught up applying them again, on shared cores. A server
// stopped on purpose (an upgrade, a rolling restart) therefore takes a
// snapshot as it stops, when its log holds enough entries past the last
// one to be worth it: the restart then restores it and has nothing of its
// own to replay. The stop takes one save longer (about 1.5 s of CPU at
// 1,000,000 volumes in one process, BenchmarkPersist). A crash skips it,
// and the restart replays as before.

// snapshotOnStopMin is the number of entries past the last snapshot from
// which a stopping server snapshots: fewer are applied again in a moment.
const snapshotOnStopMin = 1024

// snapshotOnStop takes that snapshot: on a server with a data dir, before
// raft shuts down.
func (c *Cluster) snapshotOnStop() {
	if !c.cfg.Server || c.cfg.Dev || c.raft == nil {
		return
	}
	start := time.Now()
	taken, err := c.snapGate.take(c.raft, func() bool {
		return c.logsSinceSnapshot() >= c.stopSnapshotMin && !c.configPending()
	})
	switch {
	case !taken:
	case err == nil:
		c.logger.Info("snapshot taken on stop: a restart replays nothing of its own", "took", time.Since(start))
	case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown):
	default:
		c.logger.Warn("no snapshot on stop: a restart replays the log since the last one", "error", err)
	}
}
