package nodestep

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/csi"
)

// specNode checks what the CSI spec lets a plugin expect of the CO, as the
// Kubernetes e2e mock driver does: the staging path is an existing
// directory at NodeStage, the target's parent exists at NodePublish. It
// creates the target like a real plugin (and removes it on unpublish).
type specNode struct {
	fail  error // answered by every call when set
	calls []string
}

func (n *specNode) NodeStageVolume(_ context.Context, _ string, req *csipb.NodeStageVolumeRequest) error {
	n.calls = append(n.calls, "stage")
	if fi, err := os.Stat(req.StagingTargetPath); err != nil || !fi.IsDir() {
		return status.Errorf(codes.Internal, "staging_target_path %s is not a directory: %v", req.StagingTargetPath, err)
	}
	return n.fail
}

func (n *specNode) NodePublishVolume(_ context.Context, _ string, req *csipb.NodePublishVolumeRequest) error {
	n.calls = append(n.calls, "publish")
	if fi, err := os.Stat(filepath.Dir(req.TargetPath)); err != nil || !fi.IsDir() {
		return status.Errorf(codes.Internal, "could not create target dir: parent of %s missing: %v", req.TargetPath, err)
	}
	if n.fail != nil {
		return n.fail
	}
	return os.Mkdir(req.TargetPath, 0o750)
}

func (n *specNode) NodeUnpublishVolume(_ context.Context, _ string, req *csipb.NodeUnpublishVolumeRequest) error {
	n.calls = append(n.calls, "unpublish")
	if n.fail != nil {
		return n.fail
	}
	return os.Remove(req.TargetPath)
}

func (n *specNode) NodeUnstageVolume(context.Context, string, *csipb.NodeUnstageVolumeRequest) error {
	n.calls = append(n.calls, "unstage")
	return n.fail
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Stat(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// The whole cycle: directories exist when the plugin needs them and are
// gone after unpublish and unstage.
func TestStepsCreateAndRemoveDirectories(t *testing.T) {
	root := t.TempDir()
	staging, target := csi.Paths(root, "gce-pd", "default", "vol1", "alloc1")
	n := &specNode{}
	e := &Executor{CSI: n, Root: root}
	ctx := context.Background()
	if err := e.NodeStageVolume(ctx, "", &csipb.NodeStageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging}); err != nil {
		t.Fatalf("stage: %v", err)
	}
	if err := e.NodePublishVolume(ctx, "", &csipb.NodePublishVolumeRequest{VolumeId: "d1", StagingTargetPath: staging, TargetPath: target}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := e.NodeUnpublishVolume(ctx, "", &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target}); err != nil {
		t.Fatalf("unpublish: %v", err)
	}
	if exists(t, filepath.Dir(filepath.Dir(target))) {
		t.Fatalf("per-allocation directory %s left after unpublish", filepath.Dir(filepath.Dir(target)))
	}
	if !exists(t, staging) {
		t.Fatal("unpublish removed the staging directory")
	}
	if err := e.NodeUnstageVolume(ctx, "", &csipb.NodeUnstageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging}); err != nil {
		t.Fatalf("unstage: %v", err)
	}
	if exists(t, staging) {
		t.Fatalf("staging directory %s left after unstage", staging)
	}
	if !exists(t, filepath.Join(root, "csi", "gce-pd")) {
		t.Fatal("removed more than it created")
	}
}

// A directory that still holds something (a mount the plugin did not
// take down, another allocation's target) is never removed.
func TestUnpublishLeavesNonEmptyDirectories(t *testing.T) {
	root := t.TempDir()
	_, target := csi.Paths(root, "p", "default", "vol1", "alloc1")
	_, other := csi.Paths(root, "p", "default", "vol2", "alloc1")
	e := &Executor{CSI: &specNode{}, Root: root}
	ctx := context.Background()
	for _, tp := range []string{target, other} {
		if err := e.NodePublishVolume(ctx, "", &csipb.NodePublishVolumeRequest{VolumeId: "d", TargetPath: tp}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(other, "data"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.NodeUnpublishVolume(ctx, "", &csipb.NodeUnpublishVolumeRequest{VolumeId: "d", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if exists(t, target) || !exists(t, filepath.Join(other, "data")) {
		t.Fatal("unpublish removed the wrong thing")
	}
}

func TestFailedStepsRemoveWhatTheyCreated(t *testing.T) {
	root := t.TempDir()
	staging, target := csi.Paths(root, "p", "default", "vol1", "alloc1")
	boom := status.Error(codes.ResourceExhausted, "no")
	e := &Executor{CSI: &specNode{fail: boom}, Root: root}
	ctx := context.Background()
	err := e.NodeStageVolume(ctx, "", &csipb.NodeStageVolumeRequest{VolumeId: "d", StagingTargetPath: staging})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stage: %v, want the driver's code kept", err)
	}
	err = e.NodePublishVolume(ctx, "", &csipb.NodePublishVolumeRequest{VolumeId: "d", TargetPath: target})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("publish: %v", err)
	}
	if exists(t, filepath.Join(root, "csi")) {
		t.Fatal("a failed step left the directories it created")
	}
	// A failed unpublish removes nothing: the volume may still be mounted.
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := e.NodeUnpublishVolume(ctx, "", &csipb.NodeUnpublishVolumeRequest{VolumeId: "d", TargetPath: target}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("unpublish: %v", err)
	}
	if !exists(t, target) {
		t.Fatal("a failed unpublish removed the target")
	}
}

// A publish checks its target in the per-allocation layout, not the
// staging one, and the staging path it carries in the staging one.
func TestPublishPathsAreCheckedByKind(t *testing.T) {
	root := t.TempDir()
	staging, target := csi.Paths(root, "p", "default", "vol1", "alloc1")
	for _, tc := range []struct{ name, staging, target string }{
		{"staging as target", "", staging},
		{"target as staging", target, target},
		{"journal as target", "", root + "/journal/a/b/c/d/e"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &specNode{}
			e := &Executor{CSI: n, Root: root}
			err := e.NodePublishVolume(context.Background(), "", &csipb.NodePublishVolumeRequest{VolumeId: "d", StagingTargetPath: tc.staging, TargetPath: tc.target})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not a volhost path") {
				t.Fatalf("err = %v, want InvalidArgument naming the layout", err)
			}
			if len(n.calls) != 0 {
				t.Fatalf("the plugin was called: %v", n.calls)
			}
		})
	}
}

func TestPathsAreChecked(t *testing.T) {
	root := t.TempDir()
	cases := []struct{ name, path string }{
		{"empty", ""},
		{"relative", "csi/p/staging/default/v"},
		{"unclean", root + "/csi/../../etc"},
		{"outside root", "/etc/volhost"},
		{"the root itself", root},
		// Under root_dir but not in the host/csi.Paths layout: the agent's
		// step journal, and paths of the wrong shape or kind.
		{"the step journal", root + "/journal"},
		{"in the step journal", root + "/journal/key"},
		{"the plugin directory", root + "/csi/p"},
		{"too deep", root + "/csi/p/staging/default/v/x"},
		{"a target as staging", root + "/csi/p/per-alloc/a/default/v"},
		{"not csi", root + "/other/p/staging/default/v"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := &specNode{}
			e := &Executor{CSI: n, Root: root}
			err := e.NodeStageVolume(context.Background(), "", &csipb.NodeStageVolumeRequest{VolumeId: "d", StagingTargetPath: tc.path})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			if len(n.calls) != 0 {
				t.Fatalf("the plugin was called: %v", n.calls)
			}
		})
	}
}
