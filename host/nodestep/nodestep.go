// Package nodestep runs the four CSI node steps (NodeStage, NodePublish,
// NodeUnpublish, NodeUnstage) on the machine where their paths live, with
// the directory work the CSI spec leaves to the CO: it creates the staging
// directory before NodeStageVolume ("staging_target_path ... MUST be a
// directory" the CO provides) and the target's parent before
// NodePublishVolume ("The CO SHALL ensure that the parent directory of
// this path exists"), and removes what it created once the matching
// unpublish or unstage succeeded.
//
// It is the one place that does this: the node agent (host/client) runs
// it against its local plugin sockets, and a leader driving a node in
// direct mode (no agent) runs it itself.
package nodestep

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// Executor wraps a CSI node service with the directory work, and is one
// itself (attach.NodeSteps). It holds no state: what it created is found
// again from the paths (host/csi.Paths lays them out), so a restarted
// agent cleans up after its predecessor.
type Executor struct {
	// CSI is the plugin's node service (*csi.Client).
	CSI attach.NodeSteps
	// Root, when set, confines every path to this directory (the node
	// agent's root_dir), in the host/csi.Paths layout below it: a path
	// elsewhere is refused before any call, so a confused or hostile
	// server cannot make the node create or remove directories outside
	// it, nor inside it outside the layout (the agent's step journal
	// lives under Root too).
	Root string
}

var _ attach.NodeSteps = (*Executor)(nil)

// dirMode: the staging and per-allocation directories hold mounts of
// other users' volumes; only root (the plugin) writes there.
const dirMode = 0o750

// Parent directories a step may remove above its path, per the
// host/csi.Paths layout: staging/<ns>/<vol> and per-alloc/<alloc>/<ns>/<vol>.
// staging/<ns> is shared by every volume of the namespace and stays.
const (
	stagingLevels = 0
	targetLevels  = 2 // <ns>, <alloc>
)

// The host/csi.Paths layout below Root, one entry per path element; ""
// stands for any one element (an escaped ID). A step's path must have
// exactly this shape: "under root_dir" alone would let a leader aim an
// unstage's cleanup at root_dir/journal, the agent's record of the steps
// it ran (host/client's journal), and make it repeat one.
var (
	stagingLayout = layout{[]string{"csi", "", "staging", "", ""}, "csi/<plugin>/staging/<ns>/<volume>"}
	targetLayout  = layout{[]string{"csi", "", "per-alloc", "", "", ""}, "csi/<plugin>/per-alloc/<alloc>/<ns>/<volume>"}
)

type layout struct {
	elems []string
	shape string // the same, for an error message
}

// NodeStageVolume creates the staging directory, then stages. A failed
// stage removes the directory again if it is empty (nothing was mounted).
func (e *Executor) NodeStageVolume(ctx context.Context, endpoint string, req *csipb.NodeStageVolumeRequest) error {
	p := req.GetStagingTargetPath()
	if err := e.check("staging_target_path", p, stagingLayout); err != nil {
		return err
	}
	created, err := mkdirAll(p)
	if err != nil {
		return err
	}
	if err := e.CSI.NodeStageVolume(ctx, endpoint, req); err != nil {
		removeCreated(created)
		return err
	}
	return nil
}

// NodePublishVolume creates the target's parent (the plugin creates the
// target itself), then publishes.
func (e *Executor) NodePublishVolume(ctx context.Context, endpoint string, req *csipb.NodePublishVolumeRequest) error {
	p := req.GetTargetPath()
	if err := e.check("target_path", p, targetLayout); err != nil {
		return err
	}
	if sp := req.GetStagingTargetPath(); sp != "" {
		if err := e.check("staging_target_path", sp, stagingLayout); err != nil {
			return err
		}
	}
	created, err := mkdirAll(filepath.Dir(p))
	if err != nil {
		return err
	}
	if err := e.CSI.NodePublishVolume(ctx, endpoint, req); err != nil {
		removeCreated(created)
		return err
	}
	return nil
}

// NodeUnpublishVolume unpublishes, then removes the target (the plugin
// should have, CSI spec: "The SP MUST delete the file or directory it
// created at this path") and its per-allocation parents, each only if
// empty: a directory that still holds anything is left alone.
func (e *Executor) NodeUnpublishVolume(ctx context.Context, endpoint string, req *csipb.NodeUnpublishVolumeRequest) error {
	p := req.GetTargetPath()
	if err := e.check("target_path", p, targetLayout); err != nil {
		return err
	}
	if err := e.CSI.NodeUnpublishVolume(ctx, endpoint, req); err != nil {
		return err
	}
	removeEmpty(p, targetLevels)
	return nil
}

// NodeUnstageVolume unstages, then removes the staging directory if empty.
func (e *Executor) NodeUnstageVolume(ctx context.Context, endpoint string, req *csipb.NodeUnstageVolumeRequest) error {
	p := req.GetStagingTargetPath()
	if err := e.check("staging_target_path", p, stagingLayout); err != nil {
		return err
	}
	if err := e.CSI.NodeUnstageVolume(ctx, endpoint, req); err != nil {
		return err
	}
	removeEmpty(p, stagingLevels)
	return nil
}

// check refuses a path the executor must not touch: relative (it would
// land in the process's working directory), not clean, outside Root, or
// under Root but not in the layout's shape. The answer is a gRPC
// InvalidArgument, so the leader records it like a driver's refusal, with
// its code.
func (e *Executor) check(field, p string, want layout) error {
	switch {
	case p == "":
		return status.Errorf(codes.InvalidArgument, "%s is empty", field)
	case !filepath.IsAbs(p):
		return status.Errorf(codes.InvalidArgument, "%s %q is not absolute: register the node with a root_dir", field, p)
	case filepath.Clean(p) != p:
		return status.Errorf(codes.InvalidArgument, "%s %q is not a clean path", field, p)
	case e.Root != "" && !structs.WithinRoot(e.Root, p):
		return status.Errorf(codes.InvalidArgument, "%s %q is outside this node's root_dir %q", field, p, e.Root)
	case e.Root != "" && !want.holds(e.Root, p):
		return status.Errorf(codes.InvalidArgument, "%s %q is not a volhost path under root_dir %q (want %s)",
			field, p, e.Root, filepath.Join(e.Root, want.shape))
	}
	return nil
}

// holds reports whether p, which is clean and within root, is root
// followed by exactly the layout's elements.
func (l layout) holds(root, p string) bool {
	rel, err := filepath.Rel(filepath.Clean(root), p)
	if err != nil {
		return false
	}
	elems := strings.Split(rel, string(filepath.Separator))
	if len(elems) != len(l.elems) {
		return false
	}
	for i, want := range l.elems {
		if want != "" && elems[i] != want {
			return false
		}
	}
	return true
}

// mkdirAll creates dir and any missing parents, answering the ones it
// created (outermost first) so a failed step can remove them again. A
// parent removed under it by a concurrent cleanup (another volume's
// unpublish emptied it) is created again: a bounded number of tries.
func mkdirAll(dir string) ([]string, error) {
	var err error
	for range 5 {
		var created []string
		created, err = mkdirAllOnce(dir)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			if err != nil {
				return nil, status.Errorf(codes.Internal, "could not create directory %s: %v", dir, err)
			}
			return created, nil
		}
	}
	return nil, status.Errorf(codes.Internal, "could not create directory %s: %v", dir, err)
}

func mkdirAllOnce(dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		_, err := os.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append([]string{d}, missing...)
		if filepath.Dir(d) == d {
			break
		}
	}
	var created []string
	for _, d := range missing {
		if err := os.Mkdir(d, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
			removeCreated(created)
			return nil, err
		}
		created = append(created, d)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		removeCreated(created)
		return nil, err
	}
	if !fi.IsDir() {
		removeCreated(created)
		return nil, fmt.Errorf("%s exists and is not a directory", dir)
	}
	return created, nil
}

// removeCreated removes directories this step created, innermost first,
// each only if empty.
func removeCreated(created []string) {
	for i := len(created) - 1; i >= 0; i-- {
		if os.Remove(created[i]) != nil {
			return
		}
	}
}

// removeEmpty removes p and up to levels of its parents while they are
// empty directories. Neither removal ever takes a non-empty directory, so
// a mount still in place (its root is not empty, or removal fails with
// EBUSY) is never touched; a path already gone counts as removed.
//
// p itself may be a file (a block volume's target: the plugin bind-mounts
// the device onto a file) and is then unlinked, as os.Remove would;
// its parents are always directories.
func removeEmpty(p string, levels int) {
	for i := 0; i <= levels; i++ {
		if err := removeDirOrFile(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return
		}
		p = filepath.Dir(p)
	}
}
