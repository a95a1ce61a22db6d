package csitest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/csi/csitest"
)

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, s *csitest.Server) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func unpublish(ctx context.Context, cc *grpc.ClientConn, vol, node string) error {
	_, err := csipb.NewControllerClient(cc).ControllerUnpublishVolume(ctx,
		&csipb.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: node})
	return err
}

func publish(ctx context.Context, cc *grpc.ClientConn, vol, node string) error {
	_, err := csipb.NewControllerClient(cc).ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
		VolumeId: vol, NodeId: node,
		VolumeCapability: &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{
			Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}},
	})
	return err
}

func TestScriptQueueThenOK(t *testing.T) {
	s := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	cc := dial(t, s)
	ctx := waitCtx(t)
	s.Script(csitest.ControllerUnpublish,
		csitest.Result{Code: codes.Aborted, Message: "operation pending"},
		csitest.Result{Code: codes.NotFound})
	s.Script(csitest.ControllerUnpublish, csitest.Result{Code: codes.Unavailable}) // appends

	want := []codes.Code{codes.Aborted, codes.NotFound, codes.Unavailable, codes.OK, codes.OK}
	for i, code := range want {
		err := unpublish(ctx, cc, "vol1", "n1")
		if got := status.Code(err); got != code {
			t.Fatalf("call %d: code %s, want %s (%v)", i, got, code, err)
		}
	}
	recorded := s.Calls(csitest.ControllerUnpublish)
	if len(recorded) != len(want) {
		t.Fatalf("recorded %d calls, want %d", len(recorded), len(want))
	}
	for i, c := range recorded {
		if c.Code != want[i] || !c.Done || c.Seq != i+1 || c.VolumeID != "vol1" || c.NodeID != "n1" {
			t.Errorf("call %d recorded as %+v", i, c)
		}
	}
	// Scripts are per method: another method is unaffected.
	if err := publish(ctx, cc, "vol1", "n1"); err != nil {
		t.Errorf("publish: %v", err)
	}
}

func TestAttachedModel(t *testing.T) {
	tests := []struct {
		name         string
		script       []csitest.Result
		steps        []func(context.Context, *grpc.ClientConn) error
		wantAttached bool
	}{
		{"publish attaches", nil,
			[]func(context.Context, *grpc.ClientConn) error{pub}, true},
		{"unpublish detaches", nil,
			[]func(context.Context, *grpc.ClientConn) error{pub, unpub}, false},
		{"failed publish does not attach", []csitest.Result{{Code: codes.Internal}},
			[]func(context.Context, *grpc.ClientConn) error{pub}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
			cc := dial(t, s)
			s.Script(csitest.ControllerPublish, tt.script...)
			for _, step := range tt.steps {
				_ = step(waitCtx(t), cc)
			}
			if got := s.Attached("vol1", "n1"); got != tt.wantAttached {
				t.Errorf("Attached = %v, want %v", got, tt.wantAttached)
			}
			if s.Attached("vol1", "other") {
				t.Errorf("attached to a node never published to")
			}
		})
	}
}

func pub(ctx context.Context, cc *grpc.ClientConn) error   { return publish(ctx, cc, "vol1", "n1") }
func unpub(ctx context.Context, cc *grpc.ClientConn) error { return unpublish(ctx, cc, "vol1", "n1") }

// Requests real drivers reject are rejected here too, so the host's
// requests are checked for what real drivers need.
func TestValidation(t *testing.T) {
	s := csitest.NewServer(t, csitest.Options{PublishUnpublish: true, StageUnstage: true})
	noCtrl := csitest.NewServer(t, csitest.Options{})
	ctx := waitCtx(t)
	cc, ccNoCtrl := dial(t, s), dial(t, noCtrl)
	node := csipb.NewNodeClient(cc)
	capability := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"unpublish without node id", func() error { return unpublish(ctx, cc, "vol1", "") }, codes.InvalidArgument},
		{"publish without volume id", func() error { return publish(ctx, cc, "", "n1") }, codes.InvalidArgument},
		{"publish not advertised", func() error { return publish(ctx, ccNoCtrl, "vol1", "n1") }, codes.Unimplemented},
		{"stage without capability", func() error {
			_, err := node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "/s"})
			return err
		}, codes.InvalidArgument},
		{"node publish without staging path on a staging plugin", func() error {
			_, err := node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "/t", VolumeCapability: capability})
			return err
		}, codes.FailedPrecondition},
		{"node unpublish without target", func() error {
			_, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument},
		{"unstage not advertised", func() error {
			_, err := csipb.NewNodeClient(ccNoCtrl).NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: "/s"})
			return err
		}, codes.Unimplemented},
		{"stage ok", func() error {
			_, err := node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "/s", VolumeCapability: capability})
			return err
		}, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(tt.call()); got != tt.want {
				t.Errorf("code %s, want %s", got, tt.want)
			}
		})
	}
}

func TestInFlightAndBlock(t *testing.T) {
	s := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	cc := dial(t, s)
	ctx := waitCtx(t)
	release := make(chan struct{})
	block := csitest.Result{Block: release}
	s.Script(csitest.ControllerUnpublish, block, block, block, block)

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, vol := range []string{"vol1", "vol1", "vol1", "vol2"} {
		wg.Go(func() { errs <- unpublish(ctx, cc, vol, "n1") })
	}
	if err := s.WaitFor(ctx, func() bool { return s.InFlight(csitest.ControllerUnpublish) == 4 }); err != nil {
		t.Fatal(err)
	}
	for _, c := range s.Calls(csitest.ControllerUnpublish) {
		if c.Done {
			t.Errorf("blocked call %d already done", c.Seq)
		}
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("released call: %v", err)
		}
	}
	if n := s.InFlight(csitest.ControllerUnpublish); n != 0 {
		t.Errorf("InFlight after release = %d", n)
	}
	for vol, want := range map[string]int{"vol1": 3, "vol2": 1, "": 4, "vol3": 0} {
		if got := s.MaxInFlight(csitest.ControllerUnpublish, vol); got != want {
			t.Errorf("MaxInFlight(%q) = %d, want %d", vol, got, want)
		}
	}
}

func TestBlockedCallEndsWithContext(t *testing.T) {
	s := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	cc := dial(t, s)
	s.Script(csitest.ControllerUnpublish, csitest.Result{Block: make(chan struct{})}) // never closed

	ctx, cancel := context.WithCancel(waitCtx(t))
	errc := make(chan error, 1)
	go func() { errc <- unpublish(ctx, cc, "vol1", "n1") }()
	if err := s.WaitFor(waitCtx(t), func() bool { return s.InFlight(csitest.ControllerUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}
	cancel()
	if got := status.Code(<-errc); got != codes.Canceled {
		t.Errorf("client code %s, want Canceled", got)
	}
	err := s.WaitFor(waitCtx(t), func() bool { return s.Calls(csitest.ControllerUnpublish)[0].Done })
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Calls(csitest.ControllerUnpublish)[0]; c.Code != codes.Canceled {
		t.Errorf("server recorded %s, want Canceled", c.Code)
	}
}

func TestStopRestart(t *testing.T) {
	s := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	ctx := waitCtx(t)
	if err := publish(ctx, dial(t, s), "vol1", "n1"); err != nil {
		t.Fatal(err)
	}
	// A call in flight when the driver dies fails on the client side.
	s.Script(csitest.ControllerUnpublish, csitest.Result{Block: make(chan struct{})})
	cc := dial(t, s)
	errc := make(chan error, 1)
	go func() { errc <- unpublish(ctx, cc, "vol1", "n1") }()
	if err := s.WaitFor(ctx, func() bool { return s.InFlight(csitest.ControllerUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop() // idempotent
	if got := status.Code(<-errc); got != codes.Unavailable {
		t.Errorf("in-flight call on stop: %s, want Unavailable", got)
	}
	if err := unpublish(ctx, dial(t, s), "vol1", "n1"); status.Code(err) != codes.Unavailable {
		t.Errorf("call to a stopped server: %v, want Unavailable", err)
	}

	s.Restart()
	if !s.Attached("vol1", "n1") {
		t.Errorf("attachment lost across restart")
	}
	if err := unpublish(ctx, dial(t, s), "vol1", "n1"); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if s.Attached("vol1", "n1") {
		t.Errorf("still attached after unpublish")
	}
}

func TestWaitForHonoursContext(t *testing.T) {
	s := csitest.NewServer(t, csitest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitFor(ctx, func() bool { return false }); err == nil {
		t.Fatal("WaitFor returned nil for a condition never met")
	}
}

// Many servers in one test binary: each is one socket and one gRPC server.
func TestManyServers(t *testing.T) {
	const n = 50
	ctx := waitCtx(t)
	for i := range n {
		s := csitest.NewServer(t, csitest.Options{NodeID: fmt.Sprintf("node-%d", i)})
		resp, err := csipb.NewNodeClient(dial(t, s)).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		if resp.GetNodeId() != fmt.Sprintf("node-%d", i) {
			t.Fatalf("server %d answered node ID %q", i, resp.GetNodeId())
		}
	}
}

type fatalRecorder struct {
	testing.TB
	fatal string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }

func TestScriptUnknownMethod(t *testing.T) {
	f := &fatalRecorder{TB: t}
	s := csitest.NewServer(f, csitest.Options{})
	s.Script("ControllerUnpublish", csitest.Result{Code: codes.Internal}) // missing "Volume"
	if f.fatal == "" {
		t.Fatal("Script accepted an unknown method name")
	}
}
