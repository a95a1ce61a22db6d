package cluster

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// failingLog fails its writes with err while err is set.
type failingLog struct {
	raft.LogStore
	err error
}

func (l *failingLog) StoreLogs(logs []*raft.Log) error {
	if l.err != nil {
		return l.err
	}
	return l.LogStore.StoreLogs(logs)
}

// A raft write the disk refused (full, read-only) is remembered until a
// write succeeds, and named by the no-leader refusal; a write the leader
// could not append is a 503 that says nothing was recorded, an I/O error
// one whose outcome is unknown.
func TestStorageFaultNamedAndClassified(t *testing.T) {
	full := &fs.PathError{Op: "write", Path: "/data/raft/raft.db", Err: syscall.ENOSPC}
	inner := &failingLog{LogStore: raft.NewInmemStore(), err: full}
	c := &Cluster{storage: &storageFault{dir: "/data/raft"}}
	log := faultLog{inner, c.storage}
	if err := log.StoreLogs([]*raft.Log{{Index: 1}}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("store: %v", err)
	}
	err := c.noLeaderBecauseOfDisk(structs.ErrNoLeader)
	if !errors.Is(err, structs.ErrNoLeader) || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "/data/raft") {
		t.Fatalf("no-leader refusal while the disk is full: %v", err)
	}
	inner.err = nil
	if err := log.StoreLogs([]*raft.Log{{Index: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.noLeaderBecauseOfDisk(structs.ErrNoLeader); err != structs.ErrNoLeader {
		t.Fatalf("once a write succeeded: %v", err)
	}

	ctx := context.Background()
	if err := applyErr(ctx, full); !errors.Is(err, structs.ErrNoLeader) || errors.Is(err, structs.ErrOutcomeUnknown) ||
		!strings.Contains(err.Error(), "nothing was recorded") {
		t.Fatalf("append refused by a full disk: %v", err)
	}
	if err := applyErr(ctx, &fs.PathError{Op: "write", Path: "x", Err: syscall.EROFS}); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("append refused by a read-only disk: %v", err)
	}
	if err := applyErr(ctx, &fs.PathError{Op: "sync", Path: "x", Err: syscall.EIO}); !errors.Is(err, structs.ErrOutcomeUnknown) {
		t.Fatalf("append failed with an I/O error: %v", err)
	}
}
