package cluster

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Raft's own snapshot timer wakes every SnapshotInterval to twice that (at
// random) and snapshots when SnapshotThreshold entries were appended since
// the last snapshot. Under a steady write load every server of a cluster
// passes the threshold together, so their snapshots overlap: at 1,000,000
// volumes a snapshot encodes the whole state for seconds of CPU, and three
// servers on one 2-core machine snapshotted at once during a claim load
// (10-30 s each); followers' heartbeats starved and the leader lost its
// quorum. etcd and Consul keep one member's snapshot from starving the
// others by giving each member its own moment; here the servers take
// turns by the clock, which needs no messages between them.
//
// The schedule: time is cut into periods of SnapshotInterval (from the Unix
// epoch, so every server cuts it alike), each period into one slot per
// server of the raft configuration in the order of their IDs. A server
// starts a snapshot only in the first half of its own slot, and only when
// its log holds SnapshotThreshold entries past its last snapshot. So two
// servers never snapshot at the same moment while a snapshot takes less
// than half a slot (SnapshotInterval / (2 x servers): 20 s with raft's
// default 120 s and three servers) and their clocks agree to a fraction
// of that; README "Running a million volumes" says what to set when
// snapshots take longer.
//
// A server takes one snapshot per slot, as raft's timer takes one per
// interval: the interval sets how often a server encodes its state. The
// first schedule took one whenever the threshold was passed again within
// the half slot; at 1,000,000 volumes a claim load passes 8,192 entries
// every 14 s, so each server encoded the whole state four or five times
// in its 50 s (2.5-5 s each), and the back-to-back ones were among the
// longest of a run (7 s). A scheduled snapshot that fails is tried
// again at the next check in the half slot. The snapshot fence's one
// snapshot, taken in the server's slot, is that slot's turn; the others
// (a follower's fresh one, the stop's, an operator's) do not use it.

// snapshotTimerOff is raft's SnapshotInterval when the schedule decides
// instead: raft's timer never fires in a server's lifetime.
const snapshotTimerOff = 100 * 365 * 24 * time.Hour

// snapshotSchedule is the policy the schedule applies.
type snapshotSchedule struct {
	period    time.Duration // raft's SnapshotInterval
	threshold uint64        // raft's SnapshotThreshold
	now       func() time.Time
	turns     *snapshotTurns // shared with the snapshot fence, whose snapshot can be a turn's
}

// snapshotTurns is one server's turns: its slot is open in the first
// half, once per period. A turn is claimed where the snapshot is decided,
// under the snapshot gate (snapshot_gate.go), with the time read there: a
// decision made before waiting at the gate (behind a snapshot being
// written) started its snapshot past the half slot, and a turn recorded
// by the time a snapshot ended used up the next period's.
type snapshotTurns struct {
	period     time.Duration
	mu         sync.Mutex
	nextPeriod int64 // the first period, from the Unix epoch, whose turn is not had
}

// open reports whether a server of the given rank among n may start its
// turn's snapshot at now.
func (t *snapshotTurns) open(now time.Time, rank, n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.openLocked(now, rank, n)
}

func (t *snapshotTurns) openLocked(now time.Time, rank, n int) bool {
	return inSnapshotSlot(now, t.period, rank, n) && now.UnixNano()/int64(t.period) >= t.nextPeriod
}

// claim takes the turn of now's period when it is open.
func (t *snapshotTurns) claim(now time.Time, rank, n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.openLocked(now, rank, n) {
		return false
	}
	t.nextPeriod = now.UnixNano()/int64(t.period) + 1
	return true
}

// giveBack reopens the turn claimed at now, whose snapshot failed, for a
// later check of the same half slot.
func (t *snapshotTurns) giveBack(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := now.UnixNano() / int64(t.period); t.nextPeriod == p+1 {
		t.nextPeriod = p
	}
}

// claimUnderGate is a snapshot gate's want (snapshot_gate.go) that claims
// this server's turn at the moment of the decision, after want's own
// conditions hold; at is that moment.
func (c *Cluster) claimUnderGate(s *snapshotSchedule, at *time.Time, want func() bool) func() bool {
	return func() bool {
		if !want() {
			return false
		}
		rank, n, ok := c.ownSnapshotRank()
		if !ok {
			return false
		}
		*at = s.now()
		return s.turns.claim(*at, rank, n)
	}
}

// inSnapshotSlot reports whether a server of the given rank among n may
// start a snapshot at now: in the first half of its slot of the period.
func inSnapshotSlot(now time.Time, period time.Duration, rank, n int) bool {
	if n < 1 || rank < 0 || rank >= n || period <= 0 {
		return false
	}
	slot := period / time.Duration(n)
	off := time.Duration(now.UnixNano() % int64(period))
	start := time.Duration(rank) * slot
	return off >= start && off < start+slot/2
}

// snapshotRank is id's position among the servers of conf in ID order
// (-1 when it is not one of them: not joined yet).
func snapshotRank(conf raft.Configuration, id raft.ServerID) (rank, n int) {
	ids := make([]string, 0, len(conf.Servers))
	for _, s := range conf.Servers {
		ids = append(ids, string(s.ID))
	}
	slices.Sort(ids)
	return slices.Index(ids, string(id)), len(ids)
}

// ownSnapshotRank is this server's snapshotRank in raft's current
// configuration (ok false when raft cannot give it).
func (c *Cluster) ownSnapshotRank() (rank, n int, ok bool) {
	f := c.raft.GetConfiguration()
	if f.Error() != nil {
		return 0, 0, false
	}
	rank, n = snapshotRank(f.Configuration(), raft.ServerID(c.cfg.NodeID))
	return rank, n, true
}

// checkEvery is how often the schedule looks: often enough to start early
// in a half slot, at most once a second.
func (s snapshotSchedule) checkEvery(n int) time.Duration {
	half := s.period / time.Duration(max(n, 1)) / 2
	return min(max(half/8, 10*time.Millisecond), time.Second)
}

// runSnapshotSchedule takes raft's snapshots in this server's slots until
// the cluster stops.
func (c *Cluster) runSnapshotSchedule(s snapshotSchedule) {
	defer c.wg.Done()
	n := 1
	for {
		select {
		case <-c.stopCh:
			return
		case <-time.After(s.checkEvery(n)):
		}
		rank, k, ok := c.ownSnapshotRank()
		if !ok {
			continue
		}
		n = k
		if !s.turns.open(s.now(), rank, n) {
			continue
		}
		start := time.Now()
		var at time.Time
		ok, err := c.snapGate.take(c.raft, c.claimUnderGate(&s, &at, func() bool {
			return c.logsSinceSnapshot() >= s.threshold && !c.configPending()
		}))
		if ok && err != nil {
			s.turns.giveBack(at)
		}
		switch {
		case !ok:
		case err == nil:
			c.logger.Debug("raft snapshot taken in this server's slot", "rank", rank, "servers", n, "took", time.Since(start))
		case errors.Is(err, raft.ErrNothingNewToSnapshot), errors.Is(err, raft.ErrRaftShutdown):
		default:
			c.logger.Warn("raft snapshot failed", "error", err)
		}
	}
}

// logsSinceSnapshot is how many log entries follow the last snapshot
// (raft's own test for its timer, from its public stats). The last
// snapshot is also the newest in the store: raft records a snapshot
// installed from the leader, or restored, only once the state machine has
// restored it, seconds at 1,000,000 volumes, and a stop or a turn decided
// in between from raft's stats took the installed state again.
func (c *Cluster) logsSinceSnapshot() uint64 {
	st := c.raft.Stats()
	last, err1 := strconv.ParseUint(st["last_log_index"], 10, 64)
	snap, err2 := strconv.ParseUint(st["last_snapshot_index"], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	if c.snaps != nil {
		snap = max(snap, c.snaps.newest())
	}
	if last < snap {
		return 0
	}
	return last - snap
}

// configPending reports whether the newest configuration entry is not
// applied yet: raft refuses a snapshot then (it cannot represent a change
// in flight) and logs the refusal as an error, which a server catching up
// after a restart, its slot come, did on every check. The state machine's
// own position decides, as raft's refusal does; right after a restore it
// is unknown and raft's applied index, the snapshot's, stands in.
func (c *Cluster) configPending() bool {
	applied := c.fsm.position.Load()
	if applied == 0 {
		applied = c.raft.AppliedIndex()
	}
	return configPendingAt(c.configs.latestConfiguration(), applied)
}

// configPendingAt is configPending from the newest configuration entry's
// index and the state machine's (0: no configuration entry seen).
func configPendingAt(conf, applied uint64) bool { return applied < conf }
