package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/volhost/volhost/host/state"
)

// TestRaftDirIsPrivate: the raft directory holds the log and snapshots,
// with volume secrets in clear and the keyring that seals them in saved
// snapshots. A raft directory that already existed with wider permissions
// (made by hand or by packaging, restored from a backup) was used as it
// was, readable by every local user: it is made private (0700) on open.
func TestRaftDirIsPrivate(t *testing.T) {
	dir := t.TempDir()
	raftDir := filepath.Join(dir, "raft")
	if err := os.Mkdir(raftDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(raftDir, 0o755); err != nil { // past the umask
		t.Fatal(err)
	}
	c, err := New(Config{DataDir: dir, Logger: logger(t)}, state.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	fi, err := os.Stat(raftDir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("raft directory mode %v, want 0700", fi.Mode().Perm())
	}
}
