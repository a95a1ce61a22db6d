package server

import (
	"context"
	"sync"
	"testing"

	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/structs"
)

type storeNodesView struct{ h *harness }

func (s storeNodesView) Nodes() ([]*structs.Node, error) { return s.h.store.Snapshot().Nodes(nil) }
func (s storeNodesView) Node(id string) (*structs.Node, error) {
	return s.h.store.Snapshot().NodeByID(nil, id)
}

// racingLiveness commits between() before the first transition it forwards.
type racingLiveness struct {
	s       *Server
	once    sync.Once
	between func()
}

func (r *racingLiveness) NodeLiveness(ctx context.Context, req *structs.NodeLivenessRequest) error {
	r.once.Do(r.between)
	return r.s.NodeLiveness(ctx, req)
}

// n1's agent lost its heartbeat (down, heartbeat_lost). The operator
// marks n1 down (its own word: heartbeat_lost cleared), which the
// agent's later heartbeats never undo (Tracker.Beat moves only a
// heartbeat-lost node), nor does a heartbeat that read n1 before the
// operator's write and commits after it: the store checks the
// heartbeat_lost the transition assumed as well as its status
// (FromHeartbeatLost). Before, it checked only the status, which the
// operator's write left the same.
func TestAttackHeartbeatUndoesOperatorDownInRace(t *testing.T) {
	h := newHarness(t)
	if _, err := h.srv.RegisterAgentNode(h.ctx, &structs.Node{ID: "n1", RootDir: "/var/lib/agent",
		Plugins: map[string]*structs.NodePlugin{testPlugin: {ExternalNodeID: "ext-n1", Endpoint: "unix:///var/lib/agent/csi.sock"}}}); err != nil {
		t.Fatal(err)
	}
	term := h.cluster.ReadyTerm()
	lose := func() {
		t.Helper()
		if err := h.srv.NodeLiveness(h.ctx, &structs.NodeLivenessRequest{NodeID: "n1", From: structs.NodeReady, Status: structs.NodeDown,
			Reason: "no heartbeat", Time: h.clock.Now(), Term: term}); err != nil {
			t.Fatal(err)
		}
	}
	status := func() *structs.Node {
		n, err := h.store.Snapshot().NodeByID(nil, "n1")
		if err != nil || n == nil {
			t.Fatalf("n1: %+v %v", n, err)
		}
		return n
	}

	// Control: the operator's down, then a heartbeat: n1 stays down.
	lose()
	if _, err := h.srv.UpdateNodeStatus(h.ctx, "n1", structs.NodeDown); err != nil {
		t.Fatal(err)
	}
	tr := nodeconn.NewTracker(nodeconn.TrackerConfig{Clock: h.clock}, storeNodesView{h}, h.srv)
	tr.Enable(term)
	tr.Beat(h.ctx, "n1")
	if n := status(); n.Status != structs.NodeDown {
		t.Fatalf("control: heartbeat after the operator's down: %+v, want down", n)
	}
	// Back to ready, lost again.
	if _, err := h.srv.UpdateNodeStatus(h.ctx, "n1", structs.NodeReady); err != nil {
		t.Fatal(err)
	}
	lose()
	if n := status(); n.Status != structs.NodeDown || !n.HeartbeatLost {
		t.Fatalf("n1 not heartbeat-lost: %+v", n)
	}

	// The race: the operator's down commits between the heartbeat's read and its write.
	w := &racingLiveness{s: h.srv, between: func() {
		if _, err := h.srv.UpdateNodeStatus(h.ctx, "n1", structs.NodeDown); err != nil {
			t.Errorf("operator marks n1 down: %v", err)
		}
		if n := status(); n.HeartbeatLost || n.Status != structs.NodeDown {
			t.Errorf("n1 after the operator's write: %+v", n)
		}
	}}
	tr = nodeconn.NewTracker(nodeconn.TrackerConfig{Clock: h.clock}, storeNodesView{h}, w)
	tr.Enable(term)
	tr.Beat(h.ctx, "n1")
	if n := status(); n.Status != structs.NodeDown {
		t.Errorf("n1's heartbeat (its node token's stream) undid the operator's down: status=%q heartbeat_lost=%v reason=%q; want down",
			n.Status, n.HeartbeatLost, n.StatusReason)
	}
}
