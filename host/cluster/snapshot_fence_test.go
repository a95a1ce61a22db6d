package cluster

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// putSnapshot writes a retained snapshot at index whose header is version v.
func putSnapshot(t *testing.T, fss *raft.FileSnapshotStore, index uint64, v int) string {
	t.Helper()
	sink, err := fss.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeHeader(sink, snapshotHeader{Version: v, ClusterID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(sink, `{"volhost_state":1}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

// Once the newest retained snapshot is of the features' version, the
// older-version ones are deleted: raft falls back to an older snapshot
// when the newest does not restore, and a binary older than the gates
// would restore the old one and replay a log it does not understand. A
// newest snapshot of the older version (the enabling not yet snapshotted)
// keeps everything until one is taken.
func TestSnapshotFenceRemovesOlderVersions(t *testing.T) {
	dir := t.TempDir()
	fss, err := raft.NewFileSnapshotStore(dir, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{logger: hclog.NewNullLogger()}
	if smallState(fss) {
		t.Fatal("no snapshot counted as a small state")
	}
	old1 := putSnapshot(t, fss, 10, ProtocolVersion)
	if !smallState(fss) {
		t.Fatal("a snapshot of a few bytes not counted as a small state")
	}
	if v, err := newestSnapshotVersion(fss, dir); err != nil || v != ProtocolVersion {
		t.Fatalf("newest version %d, %v", v, err)
	}
	putSnapshot(t, fss, 20, ProtocolVersion)
	newID := putSnapshot(t, fss, 30, snapshotVersionFeatures)
	// The newest is of the new version already: no snapshot is taken,
	// so the schedule's turn is not used up.
	if took, err := c.fenceSnapshots(fss, dir, always); err != nil || took {
		t.Fatalf("fence: took a snapshot %v, %v", took, err)
	}
	list, err := fss.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != newID {
		t.Fatalf("retained %+v, want only %s", list, newID)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "snapshots", old1, "*")); len(m) != 0 {
		t.Fatalf("files of %s left: %v", old1, m)
	}
}

// The fence reads a snapshot's version from its first line, not the whole
// file: raft's Open reads and checksums all of it (370 MiB at 1,000,000
// volumes) before answering. A snapshot whose body no longer matches its
// checksum shows the difference: Open refuses it, the header read does
// not.
func TestSnapshotVersionReadsOnlyTheHeader(t *testing.T) {
	dir := t.TempDir()
	fss, err := raft.NewFileSnapshotStore(dir, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	id := putSnapshot(t, fss, 10, snapshotVersionFeatures)
	state := filepath.Join(dir, "snapshots", id, "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0xff // in the body, after the header line
	if err := os.WriteFile(state, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, rc, err := fss.Open(id); err == nil {
		rc.Close()
		t.Fatal("precondition: raft's Open accepted a snapshot whose body fails its checksum")
	}
	if v, err := newestSnapshotVersion(fss, dir); err != nil || v != snapshotVersionFeatures {
		t.Fatalf("newest version %d, %v: want %d read from the header alone", v, err, snapshotVersionFeatures)
	}
}

// Deleting the older snapshots cannot be undone, so the fence first reads
// the newest back whole: one that fails its checksum keeps the older ones
// (raft falls back to them at the next start).
func TestSnapshotFenceKeepsOlderBehindACorruptNewest(t *testing.T) {
	dir := t.TempDir()
	fss, err := raft.NewFileSnapshotStore(dir, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{logger: hclog.NewNullLogger()}
	putSnapshot(t, fss, 10, ProtocolVersion)
	id := putSnapshot(t, fss, 20, snapshotVersionFeatures)
	state := filepath.Join(dir, "snapshots", id, "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0xff
	if err := os.WriteFile(state, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.fenceSnapshots(fss, dir, always); err == nil {
		t.Fatal("the fence deleted the older snapshots behind a newest one that fails its checksum")
	}
	if list, err := fss.List(); err != nil || len(list) != 2 {
		t.Fatalf("retained %d snapshots (%v), want both", len(list), err)
	}
}
