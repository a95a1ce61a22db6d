package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// A server asks raft for snapshots from five places: its turn in the
// schedule (snapshot_schedule.go), a follower that needs a fresh one
// (snapshot_fresh.go), its stop (snapshot_stop.go), the version fence
// (snapshot_fence.go) and the operator. Raft takes them one at a time, but
// it takes every one it is asked for: it refuses only when nothing was
// ever applied, not when nothing was applied since the snapshot just
// before. Each request was decided from a view read before the snapshot
// in flight had ended, so the leader took a fresh snapshot for a follower
// again behind an operator's, two followers needing one got one each, and
// a stop took one behind its turn's: each a second full encode at the same
// index (at 1,000,000 volumes 6 to 10 s of a core and 370 MiB written).
//
// So every snapshot is decided and taken through one gate: one decision
// at a time, held until raft has answered the snapshot it asked for (raft
// answers after it recorded the snapshot, so the next decision sees it),
// and made only once no snapshot is being written, also one raft started
// itself (an install from the leader, a restore, a single server's timer).
// Raft records an install or a restore only after the state machine has
// restored it, so a decision reads the newest snapshot from the store as
// well as raft's stats (logsSinceSnapshot, freshSnapshots.newest).

// snapshotGate orders this server's snapshots.
type snapshotGate struct {
	decide sync.Mutex // held from a decision until raft answered its snapshot

	mu       sync.Mutex
	writing  int        // snapshots between the store's Create and their sink's Close or Cancel
	finished *sync.Cond // on mu: writing fell to 0
}

func newSnapshotGate() *snapshotGate {
	g := &snapshotGate{}
	g.finished = sync.NewCond(&g.mu)
	return g
}

// take waits until no snapshot is being written, then asks want whether a
// snapshot is still wanted and, if so, has raft take it. want runs under
// the gate: what it reads is not changed by this server's other requests
// until take returns.
func (g *snapshotGate) take(r *raft.Raft, want func() bool) (taken bool, err error) {
	g.decide.Lock()
	defer g.decide.Unlock()
	g.mu.Lock()
	for g.writing > 0 {
		g.finished.Wait()
	}
	g.mu.Unlock()
	if !want() {
		return false, nil
	}
	return true, r.Snapshot().Error()
}

// always is take's want for a snapshot asked for outright.
func always() bool { return true }

// started records a snapshot raft began writing; end, called once it was
// closed or cancelled, records that it ended.
func (g *snapshotGate) started() (end func()) {
	g.mu.Lock()
	g.writing++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.writing--
			if g.writing == 0 {
				g.finished.Broadcast()
			}
			g.mu.Unlock()
		})
	}
}

// gatedSink is a snapshot sink whose end the gate sees.
type gatedSink struct {
	raft.SnapshotSink
	end func()
}

func (s *gatedSink) Close() error {
	defer s.end()
	return s.SnapshotSink.Close()
}

func (s *gatedSink) Cancel() error {
	defer s.end()
	return s.SnapshotSink.Cancel()
}
