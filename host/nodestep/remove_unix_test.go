//go:build unix

package nodestep

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/host/csi"
)

// countRemovals wraps the removal system calls for the test's duration.
func countRemovals(t *testing.T) (rmdirs, unlinks *[]string) {
	t.Helper()
	rmdirs, unlinks = new([]string), new([]string)
	oldRmdir, oldUnlink := sysRmdir, sysUnlink
	sysRmdir = func(p string) error { *rmdirs = append(*rmdirs, p); return oldRmdir(p) }
	sysUnlink = func(p string) error { *unlinks = append(*unlinks, p); return oldUnlink(p) }
	t.Cleanup(func() { sysRmdir, sysUnlink = oldRmdir, oldUnlink })
	return rmdirs, unlinks
}

// Unpublishing a filesystem volume removes the target and its two
// per-allocation parents with one rmdir each and no unlink (os.Remove
// would try, and fail, an unlink on each first).
func TestUnpublishRemovesDirectoriesWithRmdirOnly(t *testing.T) {
	root := t.TempDir()
	_, target := csi.Paths(root, "p", "default", "vol1", "alloc1")
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	rmdirs, unlinks := countRemovals(t)
	e := &Executor{CSI: &fileNode{}, Root: root} // leaves the target directory for the executor
	if err := e.NodeUnpublishVolume(context.Background(), "", &csipb.NodeUnpublishVolumeRequest{VolumeId: "d", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if exists(t, target) || exists(t, filepath.Dir(target)) || exists(t, filepath.Dir(filepath.Dir(target))) {
		t.Fatal("target or its per-allocation parents left behind")
	}
	if len(*rmdirs) != targetLevels+1 || len(*unlinks) != 0 {
		t.Fatalf("rmdir calls %q, unlink calls %q: want %d rmdirs and no unlink", *rmdirs, *unlinks, targetLevels+1)
	}
}

// A block volume's target is a file the plugin bind-mounted the device
// onto; one left behind after NodeUnpublish is unlinked (rmdir refuses it
// with ENOTDIR first) and the empty parents still go.
func TestUnpublishRemovesFileTarget(t *testing.T) {
	root := t.TempDir()
	_, target := csi.Paths(root, "p", "default", "vol1", "alloc1")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rmdirs, unlinks := countRemovals(t)
	e := &Executor{CSI: &fileNode{}, Root: root}
	if err := e.NodeUnpublishVolume(context.Background(), "", &csipb.NodeUnpublishVolumeRequest{VolumeId: "d", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if exists(t, target) || exists(t, filepath.Dir(target)) {
		t.Fatal("file target or its parent left behind")
	}
	if len(*unlinks) != 1 || (*unlinks)[0] != target {
		t.Fatalf("unlink calls %q: want exactly the target", *unlinks)
	}
	if len(*rmdirs) != targetLevels+1 {
		t.Fatalf("rmdir calls %q: want %d", *rmdirs, targetLevels+1)
	}
}

// A directory with content is neither removed nor tried with unlink.
func TestRemoveKeepsNonEmptyDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, unlinks := countRemovals(t)
	if err := removeDirOrFile(dir); err == nil {
		t.Fatal("a non-empty directory was removed")
	}
	if !exists(t, filepath.Join(dir, "data")) || len(*unlinks) != 0 {
		t.Fatalf("content gone or unlink tried (%q)", *unlinks)
	}
}

// fileNode is a node plugin whose unpublish unmounts but leaves the
// target, file or directory, in place: the executor's removal takes it.
type fileNode struct{ specNode }

func (*fileNode) NodeUnpublishVolume(context.Context, string, *csipb.NodeUnpublishVolumeRequest) error {
	return nil
}
