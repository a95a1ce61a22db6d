package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A second lock on a held data dir fails at once naming the holder; once
// released, the directory can be locked again.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, lockFileName))
	if strings.TrimSpace(string(raw)) != fmt.Sprint(os.Getpid()) {
		t.Fatalf("lock file holds %q, want this pid", raw)
	}
	_, err = lockDataDir(dir)
	if !errors.Is(err, ErrDataDirLocked) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	if err := first.release(); err != nil {
		t.Fatal(err)
	}
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	_ = again.release()
}

// A second agent on a data dir in use fails in New, before touching raft.
func TestSecondAgentOnDataDirFails(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.BindAddr = "127.0.0.1:0"
	cfg.HTTP.Address = "127.0.0.1:0"
	l, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	_, err = New(cfg, Options{})
	if !errors.Is(err, ErrDataDirLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second agent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft")); err == nil {
		t.Fatal("the refused agent created raft files")
	}
}
