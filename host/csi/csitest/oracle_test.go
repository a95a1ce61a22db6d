package csitest_test

import (
	"context"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/csi/csitest"
)

// world is one storage (a controller) and two machines, m1 reached
// through two endpoints, m2 through one.
type world struct {
	oracle       *csitest.Oracle
	ctl          *csitest.Server
	m1, m1b, m2  *csitest.Server
	ctlc, n1, n2 *nodeConn
}

type nodeConn struct {
	ctl  csipb.ControllerClient
	node csipb.NodeClient
}

func newWorld(t *testing.T) *world {
	t.Helper()
	o := csitest.NewOracle()
	w := &world{oracle: o,
		ctl: csitest.NewServer(t, csitest.Options{Oracle: o, PublishUnpublish: true}),
		m1:  csitest.NewServer(t, csitest.Options{Oracle: o, Machine: "m1", NodeID: "ext-1", StageUnstage: true}),
		m1b: csitest.NewServer(t, csitest.Options{Oracle: o, Machine: "m1", NodeID: "ext-1", StageUnstage: true}),
		m2:  csitest.NewServer(t, csitest.Options{Oracle: o, Machine: "m2", NodeID: "ext-2", StageUnstage: true}),
	}
	conn := func(s *csitest.Server) *nodeConn {
		cc := dial(t, s)
		return &nodeConn{ctl: csipb.NewControllerClient(cc), node: csipb.NewNodeClient(cc)}
	}
	w.ctlc, w.n1, w.n2 = conn(w.ctl), conn(w.m1b), conn(w.m2)
	return w
}

var (
	singleWriter = &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{
		Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	multiWriter = &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{
		Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}}
)

func (w *world) attach(ctx context.Context, vol, node string, vc *csipb.VolumeCapability) error {
	_, err := w.ctlc.ctl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: node, VolumeCapability: vc})
	return err
}

func (w *world) detach(ctx context.Context, vol, node string) error {
	_, err := w.ctlc.ctl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: node})
	return err
}

func (n *nodeConn) stage(ctx context.Context, vol, path string) error {
	_, err := n.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: path, VolumeCapability: multiWriter})
	return err
}

func (n *nodeConn) unstage(ctx context.Context, vol, path string) error {
	_, err := n.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: path})
	return err
}

func (n *nodeConn) publish(ctx context.Context, vol, staging, target string) error {
	_, err := n.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: multiWriter})
	return err
}

func (n *nodeConn) unpublish(ctx context.Context, vol, target string) error {
	_, err := n.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target})
	return err
}

// TestOracleSpecRules: each of the CSI spec's preconditions the Oracle
// checks is recorded when broken (and only then), with the call and the
// rule; the call still does what it asked, as a driver would, except the
// spec's own FAILED_PRECONDITION of a single-node volume published twice.
func TestOracleSpecRules(t *testing.T) {
	ok := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		run  func(ctx context.Context, w *world) error // the last call's answer
		rule string                                    // "" when no rule is broken
		code codes.Code
		then func(t *testing.T, w *world)
	}{
		{name: "the whole life cycle in order", run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", singleWriter))
			ok(w.n1.stage(ctx, "vol", "/s/vol"))
			ok(w.n1.publish(ctx, "vol", "/s/vol", "/t/a1"))
			ok(w.n1.publish(ctx, "vol", "/s/vol", "/t/a2"))
			ok(w.n1.unpublish(ctx, "vol", "/t/a1"))
			ok(w.n1.unpublish(ctx, "vol", "/t/a2"))
			ok(w.n1.unstage(ctx, "vol", "/s/vol"))
			return w.detach(ctx, "vol", "ext-1")
		}, then: func(t *testing.T, w *world) {
			if st := w.oracle.Machine("m1"); len(st.Staged)+len(st.Published) != 0 || len(w.oracle.Attachments()) != 0 {
				t.Errorf("state left: %+v %+v", st, w.oracle.Attachments())
			}
		}},
		{name: "publish from a path nobody staged", rule: csitest.RuleStagedFirst, run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", singleWriter))
			return w.n1.publish(ctx, "vol", "/s/vol", "/t/a1")
		}, then: func(t *testing.T, w *world) {
			// The driver did it: the target is there, on an empty directory.
			if _, there := w.oracle.Machine("m1").Published["/t/a1"]; !there {
				t.Error("the publish was not applied")
			}
		}},
		{name: "publish after the path was unstaged", rule: csitest.RuleStagedFirst, run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", singleWriter))
			ok(w.n1.stage(ctx, "vol", "/s/vol"))
			ok(w.n1.unstage(ctx, "vol", "/s/vol"))
			return w.n1.publish(ctx, "vol", "/s/vol", "/t/a1")
		}},
		{name: "stage of a volume not attached to the machine", rule: csitest.RuleAttachedFirst, run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-2", multiWriter))
			return w.n1.stage(ctx, "vol", "/s/vol")
		}},
		{name: "a second staging path for a volume on a machine", rule: csitest.RuleOneStagingPath, run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", singleWriter))
			ok(w.n1.stage(ctx, "vol", "/s/vol"))
			return w.n1.stage(ctx, "vol", "/other-root/s/vol")
		}},
		{name: "the same staging path again is idempotent", run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", singleWriter))
			ok(w.n1.stage(ctx, "vol", "/s/vol"))
			return w.n1.stage(ctx, "vol", "/s/vol")
		}},
		{name: "unstage under a published target", rule: csitest.RuleUnstageAfterUnpublish, run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", singleWriter))
			ok(w.n1.stage(ctx, "vol", "/s/vol"))
			ok(w.n1.publish(ctx, "vol", "/s/vol", "/t/a1"))
			return w.n1.unstage(ctx, "vol", "/s/vol")
		}},
		{name: "the machine's other endpoint unstages under a target", rule: csitest.RuleUnstageAfterUnpublish, run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", singleWriter))
			ok(w.n1.stage(ctx, "vol", "/s/vol"))
			ok(w.n1.publish(ctx, "vol", "/s/vol", "/t/a1"))
			cc := dial(t, w.m1) // m1's first endpoint: the same machine
			_, err := csipb.NewNodeClient(cc).NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "vol", StagingTargetPath: "/s/vol"})
			return err
		}},
		{name: "detach under a staged path", rule: csitest.RuleUnpublishAfterNode, run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", singleWriter))
			ok(w.n1.stage(ctx, "vol", "/s/vol"))
			return w.detach(ctx, "vol", "ext-1")
		}, then: func(t *testing.T, w *world) {
			if w.oracle.Attached("vol", "ext-1") {
				t.Error("the detach was not applied")
			}
		}},
		{name: "detach of another machine leaves this one alone", run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", multiWriter))
			ok(w.n1.stage(ctx, "vol", "/s/vol"))
			ok(w.n1.publish(ctx, "vol", "/s/vol", "/t/a1"))
			return w.detach(ctx, "vol", "ext-2") // not attached there: a no-op
		}},
		{name: "a single-node volume published to a second node", rule: csitest.RuleSingleNode, code: codes.FailedPrecondition,
			run: func(ctx context.Context, w *world) error {
				ok(w.attach(ctx, "vol", "ext-1", singleWriter))
				return w.attach(ctx, "vol", "ext-2", singleWriter)
			}, then: func(t *testing.T, w *world) {
				if w.oracle.Attached("vol", "ext-2") {
					t.Error("a refused publish attached")
				}
			}},
		{name: "a multi-node volume on two nodes", run: func(ctx context.Context, w *world) error {
			ok(w.attach(ctx, "vol", "ext-1", multiWriter))
			return w.attach(ctx, "vol", "ext-2", multiWriter)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			err := tt.run(waitCtx(t), w)
			if got := status.Code(err); got != tt.code {
				t.Fatalf("last call answered %s (%v), want %s", got, err, tt.code)
			}
			v := w.oracle.Violations()
			switch {
			case tt.rule == "" && len(v) != 0:
				t.Fatalf("violations where the spec was followed: %v", v)
			case tt.rule != "" && (len(v) != 1 || v[0].Rule != tt.rule):
				t.Fatalf("violations %v, want one of %q", v, tt.rule)
			case tt.rule != "" && !strings.Contains(v[0].String(), "vol"):
				t.Errorf("violation does not name its volume: %s", v[0])
			}
			if w.oracle.Checks() == 0 {
				t.Error("no check counted")
			}
			if tt.then != nil {
				tt.then(t, w)
			}
		})
	}
}

// TestOracleLostAnswer: a Lost outcome runs the call (the state changes)
// and answers the scripted code; a plain scripted error runs nothing.
func TestOracleLostAnswer(t *testing.T) {
	ctx := waitCtx(t)
	w := newWorld(t)
	w.m1b.Script(csitest.NodeStage, csitest.Result{Code: codes.Internal}, csitest.Lost(codes.Unavailable))
	if err := w.attach(ctx, "vol", "ext-1", singleWriter); err != nil {
		t.Fatal(err)
	}
	if err := w.n1.stage(ctx, "vol", "/s/vol"); status.Code(err) != codes.Internal {
		t.Fatalf("first stage: %v", err)
	}
	if st := w.oracle.Machine("m1"); len(st.Staged) != 0 {
		t.Fatalf("a refused stage staged: %v", st.Staged)
	}
	if err := w.n1.stage(ctx, "vol", "/s/vol"); status.Code(err) != codes.Unavailable {
		t.Fatalf("second stage: %v", err)
	}
	if st := w.oracle.Machine("m1"); st.Staged["/s/vol"] != "vol" {
		t.Fatalf("a lost answer's stage did not run: %v", st.Staged)
	}
	w.ctl.Script(csitest.ControllerUnpublish, csitest.Lost(codes.DeadlineExceeded))
	if err := w.detach(ctx, "vol", "ext-1"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("detach: %v", err)
	}
	if w.oracle.Attached("vol", "ext-1") {
		t.Fatal("a lost answer's detach did not run")
	}
	// It ran under a staged path: the check was made too.
	if v := w.oracle.Violations(); len(v) != 1 || v[0].Rule != csitest.RuleUnpublishAfterNode {
		t.Fatalf("violations %v", v)
	}
	if got := w.ctl.Calls(csitest.ControllerUnpublish); len(got) != 1 || got[0].Code != codes.DeadlineExceeded {
		t.Fatalf("recorded %+v", got)
	}
	if m := w.oracle.MachineOf("ext-1"); m != "m1" {
		t.Fatalf("MachineOf(ext-1) = %q", m)
	}
}

// TestOracleSetNodeID: a replaced instance answers its new ID in
// NodeGetInfo; both IDs are the machine's, so an attachment made to the
// old one is still found there.
func TestOracleSetNodeID(t *testing.T) {
	ctx := waitCtx(t)
	w := newWorld(t)
	if err := w.attach(ctx, "vol", "ext-1", multiWriter); err != nil {
		t.Fatal(err)
	}
	w.m1b.SetNodeID("ext-1-new")
	resp, err := w.n1.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || resp.GetNodeId() != "ext-1-new" {
		t.Fatalf("NodeGetInfo = %v, %v", resp, err)
	}
	if w.oracle.MachineOf("ext-1-new") != "m1" || w.oracle.MachineOf("ext-1") != "m1" {
		t.Fatalf("machines: %q %q", w.oracle.MachineOf("ext-1-new"), w.oracle.MachineOf("ext-1"))
	}
	if !w.oracle.AttachedTo("vol", "m1") {
		t.Fatal("the old instance's attachment is not on the machine")
	}
	if st := w.oracle.Machine("m1"); len(st.ExternalIDs) != 2 {
		t.Fatalf("external IDs %v", st.ExternalIDs)
	}
}
