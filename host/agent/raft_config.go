package agent

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/cluster"
)

// The raft settings of a server block, named as Consul names them
// (raft_multiplier, raft_snapshot_threshold, raft_snapshot_interval,
// raft_trailing_logs) since operators of large states know them from
// there. A large state makes every snapshot, restore and catch-up longer
// and the servers' CPU scarcer: README "Running a million volumes" says
// what to set. Unset, raft's defaults apply.
//
// raft_multiplier scales raft's failure detection: heartbeat and election
// timeouts of multiplier x 1 s and a leader lease of multiplier x 500 ms
// (Consul's raft_multiplier, whose production default is 5). A server
// whose CPU a snapshot, a collection or a burst of reads holds for longer
// than the lease loses its leadership without any fault: a larger
// multiplier trades a slower failover (StepUpDelay grows with the lease)
// for not stepping down under load.

// maxRaftMultiplier is Consul's bound: beyond it a dead leader is noticed
// only after most of a minute.
const maxRaftMultiplier = 10

func mergeRaft(c, o *ServerConfig) {
	setInt(&c.RaftMultiplier, o.RaftMultiplier)
	setInt(&c.RaftSnapshotThreshold, o.RaftSnapshotThreshold)
	setInt(&c.RaftTrailingLogs, o.RaftTrailingLogs)
	setString(&c.RaftSnapshotInterval, o.RaftSnapshotInterval)
}

// validateRaft checks the raft settings and parses the interval into d.
func (sv *ServerConfig) validateRaft(d *Durations) []error {
	var errs []error
	if sv.RaftMultiplier < 0 || sv.RaftMultiplier > maxRaftMultiplier {
		errs = append(errs, fmt.Errorf("server.raft_multiplier: must be between 1 and %d, got %d", maxRaftMultiplier, sv.RaftMultiplier))
	}
	if sv.RaftSnapshotThreshold < 0 {
		errs = append(errs, fmt.Errorf("server.raft_snapshot_threshold: must not be negative, got %d", sv.RaftSnapshotThreshold))
	}
	if sv.RaftTrailingLogs < 0 {
		errs = append(errs, fmt.Errorf("server.raft_trailing_logs: must not be negative, got %d", sv.RaftTrailingLogs))
	}
	if v := sv.RaftSnapshotInterval; v != "" {
		p, err := time.ParseDuration(v)
		if err != nil || p < time.Second {
			errs = append(errs, fmt.Errorf("server.raft_snapshot_interval: %q is not a duration of at least 1s (e.g. \"120s\")", v))
		} else {
			d.RaftSnapshotInterval = p
		}
	}
	return errs
}

// applyRaft sets the raft settings of a server on cc (zero values keep
// the cluster's defaults).
func applyRaft(cc *cluster.Config, sv *ServerConfig, d Durations) {
	if m := time.Duration(sv.RaftMultiplier); m > 0 {
		def := raft.DefaultConfig()
		cc.HeartbeatTimeout = m * def.HeartbeatTimeout
		cc.ElectionTimeout = m * def.ElectionTimeout
		cc.LeaderLeaseTimeout = m * def.LeaderLeaseTimeout
	}
	cc.SnapshotThreshold = uint64(sv.RaftSnapshotThreshold)
	cc.TrailingLogs = uint64(sv.RaftTrailingLogs)
	cc.SnapshotInterval = d.RaftSnapshotInterval
}
