package cluster

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Once the cluster enabled a feature, this server's snapshots carry
// snapshotVersionFeatures, which a binary older than the gates refuses
// ("snapshot is cluster protocol version 2"). But raft, on start, falls
// back to an older retained snapshot when the newest does not restore,
// and replays the log after it: the previous release, started on this
// data dir by mistake, loaded the snapshot from before the enabling, then
// skipped the entries it did not know and refused the publishing claims
// ("undecodable log entry skipped", "a new claim starts at taken"), and
// served a diverged replica (found by test/peers/e2e TestUpgradeRolling).
// So once a feature is enabled the server makes sure its newest snapshot
// is of the new version (taking one at once when its last one was small
// or it is a single node, else in its snapshot turn) and deletes the
// retained snapshots older than that: an
// older binary then finds no snapshot it can read, and raft stops it at
// start ("failed to load any existing snapshots").

// snapshotFenceCheck is how often the fence looks until it has run.
const snapshotFenceCheck = time.Second

// runSnapshotFence waits for the first enabled feature, then fences this
// server's snapshots (once: features are never disabled). schedule is the
// snapshot turns (nil: a single node, which snapshots at once).
func (c *Cluster) runSnapshotFence(schedule *snapshotSchedule, snaps *raft.FileSnapshotStore, dir string) {
	defer c.wg.Done()
	every := snapshotFenceCheck
	if schedule != nil {
		every = min(every, schedule.checkEvery(3))
	}
	for {
		select {
		case <-c.stopCh:
			return
		case <-time.After(every):
		}
		if len(c.meta.enabledNames()) == 0 {
			continue
		}
		// A large state's snapshot is this server's turn of the schedule
		// (snapshot_schedule.go), claimed as it is decided.
		want, at := always, time.Time{}
		if schedule != nil && !smallState(snaps) {
			if !c.inOwnSnapshotTurn(schedule) {
				continue
			}
			want = c.claimUnderGate(schedule, &at, always)
		}
		took, err := c.fenceSnapshots(snaps, dir, want)
		if errors.Is(err, errTurnGone) {
			continue
		}
		if !took && !at.IsZero() {
			schedule.turns.giveBack(at) // claimed, and its snapshot failed
		}
		if err == nil {
			return
		}
		if errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		c.logger.Warn("snapshots from before the enabled features are kept for now; retrying", "error", err)
	}
}

// smallStateBytes is the size of the newest snapshot under which the
// fence does not wait for this server's snapshot turn: the turns keep
// large states' snapshots (seconds of CPU each) from running on every
// server at once, and a small one is over in a moment. Waiting for the
// turn (up to raft_snapshot_interval) is the window in which the previous
// release, started here by mistake, would still replay the log.
const smallStateBytes = 64 << 20

// smallState: the newest retained snapshot is smaller than
// smallStateBytes (false without one: its size is unknown).
func smallState(snaps *raft.FileSnapshotStore) bool {
	list, err := snaps.List()
	return err == nil && len(list) > 0 && list[0].Size < smallStateBytes
}

// inOwnSnapshotTurn: no schedule, or this server's turn is open now.
func (c *Cluster) inOwnSnapshotTurn(s *snapshotSchedule) bool {
	if s == nil {
		return true
	}
	rank, n, ok := c.ownSnapshotRank()
	if !ok {
		return false
	}
	return s.turns.open(s.now(), rank, n)
}

// errTurnGone is the fence's snapshot not taken: this server's turn was
// had, or its half slot ended, while it waited at the gate.
var errTurnGone = errors.New("snapshot turn gone")

// fenceSnapshots takes a snapshot, if want holds under the snapshot gate,
// unless the newest is already of the new version, then deletes every
// older-version one. took: it took a snapshot.
func (c *Cluster) fenceSnapshots(snaps *raft.FileSnapshotStore, dir string, want func() bool) (took bool, err error) {
	newest, err := newestSnapshotVersion(snaps, dir)
	if err != nil {
		return false, err
	}
	if newest != snapshotVersionFeatures {
		asked, err := c.snapGate.take(c.raft, want)
		if !asked {
			return false, errTurnGone
		}
		if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return false, fmt.Errorf("snapshot: %w", err)
		}
		took = err == nil
	}
	return took, c.dropOlderSnapshots(snaps, dir)
}

// dropOlderSnapshots deletes every retained snapshot older than the newest
// once the newest is of the new version.
func (c *Cluster) dropOlderSnapshots(snaps *raft.FileSnapshotStore, dir string) error {
	// Every finished snapshot on disk, not the retained few raft's List
	// shows: raft renames a snapshot into place before it reaps the ones
	// past its retain count, so a crash in between leaves more, and one the
	// fence did not see moved up into raft's List once those above it were
	// gone. The same store type lists them, in raft's order.
	all, err := raft.NewFileSnapshotStoreWithLogger(dir, math.MaxInt32, hclog.NewNullLogger())
	if err != nil {
		return err
	}
	list, err := all.List()
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return errors.New("no snapshot retained")
	}
	// The newest is judged from this same list, so a snapshot finished
	// since the first look is judged too.
	if v, err := snapshotVersionOf(dir, list[0].ID); err != nil {
		return err
	} else if v != snapshotVersionFeatures {
		return fmt.Errorf("the newest snapshot %s is still version %d", list[0].ID, v)
	}
	var old []string
	for _, m := range list[1:] {
		if v, err := snapshotVersionOf(dir, m.ID); err != nil || v != snapshotVersionFeatures {
			old = append(old, m.ID)
		}
	}
	if len(old) == 0 {
		return nil
	}
	// Deleting the older snapshots is the one step not undone: the one
	// kept instead must read back whole (raft's Open checks its checksum),
	// else raft at the next start has nothing to fall back to.
	_, rc, err := all.Open(list[0].ID)
	if err != nil {
		return fmt.Errorf("the newest snapshot %s does not read back, keeping the older ones: %w", list[0].ID, err)
	}
	_ = rc.Close()
	for _, id := range old {
		if err := os.RemoveAll(filepath.Join(dir, "snapshots", id)); err != nil {
			return fmt.Errorf("remove snapshot %s: %w", id, err)
		}
		c.logger.Info("snapshot from before the enabled features removed: an older binary cannot fall back to it", "snapshot", id)
	}
	return nil
}

// newestSnapshotVersion is the header version of the newest retained
// snapshot (0 when there is none).
func newestSnapshotVersion(snaps *raft.FileSnapshotStore, dir string) (int, error) {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return 0, err
	}
	return snapshotVersionOf(dir, list[0].ID)
}

// snapshotVersionOf reads a retained snapshot's header version (0: a
// stream without the cluster header, the oldest format) from the first
// line of its file in raft's file store (dir/snapshots/ID/state.bin, the
// layout the removal above relies on too). Not through the store's Open:
// that reads and checksums the whole file first, 370 MiB at 1,000,000
// volumes, and the fence read two to four of them in the snapshot turn
// whose own snapshot the reads then slowed (a profile of a follower's turn
// during the claims). The fence checks the whole of one file, the newest,
// and only when it is about to delete others.
func snapshotVersionOf(dir, id string) (int, error) {
	f, err := os.Open(filepath.Join(dir, "snapshots", id, "state.bin"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h, _, err := readHeader(f)
	if err != nil {
		return 0, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if h == nil {
		return 0, nil
	}
	return h.Version, nil
}
