package cluster

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// snapshotDirsOnDisk is every finished snapshot directory under
// dir/snapshots (raft skips only the ".tmp" ones), whatever the store's
// retain count lets List show.
func snapshotDirsOnDisk(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// Invariant 1: after fenceSnapshots returns nil, no retained snapshot the
// previous release can read remains.
//
// raft's FileSnapshotStore.List stops at the retain count (2 here, as
// snapshotsRetained), but the directory can hold more: raft renames a
// finished snapshot into place and only then reaps the ones beyond retain
// (FileSnapshotSink.Close), so a crash or a failed reap in between leaves
// three. The fence deletes only what List showed it; the older-version
// snapshot List did not show moves up into List once the one above it is
// gone, and raft (this binary's or the previous release's, both with
// retain 2) falls back to it at start.
func TestAttackFenceLeavesOlderVersionBeyondRetain(t *testing.T) {
	dir := t.TempDir()
	// The state a crash between raft's rename and its reap leaves: three
	// snapshots on disk (written through a store that retains three, so
	// none is reaped), the newest the fence's own, of the new version.
	wide, err := raft.NewFileSnapshotStore(dir, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	oldest := putSnapshot(t, wide, 10, ProtocolVersion)
	putSnapshot(t, wide, 20, ProtocolVersion)
	newID := putSnapshot(t, wide, 30, snapshotVersionFeatures)

	// The server restarts: its store retains snapshotsRetained.
	fss, err := raft.NewFileSnapshotStore(dir, snapshotsRetained, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{logger: hclog.NewNullLogger()}
	if _, err := c.fenceSnapshots(fss, dir, always); err != nil {
		t.Fatal(err)
	}

	// What raft's restore at the next start walks, newest first.
	list, err := fss.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range list {
		v, err := snapshotVersionOf(dir, m.ID)
		if err != nil || v != snapshotVersionFeatures {
			t.Errorf("invariant 1 broken: after the fence returned nil, raft's List (newest %s) still offers snapshot %s of version %d (%v): "+
				"the previous release fails the newest and falls back to it", newID, m.ID, v, err)
		}
	}
	for _, id := range snapshotDirsOnDisk(t, dir) {
		if v, err := snapshotVersionOf(dir, id); err != nil || v != snapshotVersionFeatures {
			t.Errorf("invariant 1 broken: snapshot %s of version %d (%v) left on disk (oldest written: %s)", id, v, err, oldest)
		}
	}
}

// The diff (dd855a2) says the fence reads the newest snapshot back whole
// "only before deleting the older ones". It reads it whenever two or more
// are retained, also when every one is already of the new version and
// there is nothing to delete: the state of every server restarted after
// its fence, whose fence then reads the whole newest (370 MiB at 1,000,000
// volumes) in its snapshot turn at every start, the cost c62f2d1 set out
// to remove. And when that newest fails its checksum, the fence returns an
// error although the data dir is already fenced, so runSnapshotFence logs
// "snapshots from before the enabled features are kept for now; retrying"
// (there are none) and reads the whole file again at every check of the
// turn until raft's next snapshot replaces it.
func TestAttackFenceReadsNewestWholeWithNothingToDelete(t *testing.T) {
	dir := t.TempDir()
	fss, err := raft.NewFileSnapshotStore(dir, snapshotsRetained, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{logger: hclog.NewNullLogger()}
	putSnapshot(t, fss, 10, snapshotVersionFeatures)
	id := putSnapshot(t, fss, 20, snapshotVersionFeatures)
	// The body of the newest no longer matches its checksum: the only way
	// to see from outside that the fence read it whole.
	state := filepath.Join(dir, "snapshots", id, "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0xff
	if err := os.WriteFile(state, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.fenceSnapshots(fss, dir, always); err != nil {
		t.Fatalf("every retained snapshot is already of version %d, nothing is to be deleted, yet the fence read the newest whole and failed: %v",
			snapshotVersionFeatures, err)
	}
	if list, err := fss.List(); err != nil || len(list) != 2 {
		t.Fatalf("retained %d snapshots (%v), want both", len(list), err)
	}
}
