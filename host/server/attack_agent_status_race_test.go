package server

import (
	"context"
	"sync"
	"testing"

	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/structs"
)

// racingLog is the cluster, except that before the first NodeUpsert it
// forwards it runs between() first: a write committed between
// RegisterAgentNode's read of the stored node and its own commit.
type racingLog struct {
	*cluster.Cluster
	once    sync.Once
	between func()
}

func (l *racingLog) Apply(ctx context.Context, t structs.MessageType, req any) (uint64, any, error) {
	if t == structs.NodeUpsertType {
		l.once.Do(l.between)
	}
	return l.Cluster.Apply(ctx, t, req)
}

// An operator marks agent node n1 down (PUT /v1/node/n1/status, which
// needs operator:write). n1's agent, holding only its node token,
// reconnects: a hello after the operator's write leaves n1 down, and so
// does one whose read of the node came before that write and whose
// commit after it. The store keeps the stored status for an agent's
// hello (HoldOperatorFields=node_rpc); before, the hello committed the
// "ready" it had read, and the node token undid the operator's word.
func TestAttackAgentHelloUndoesOperatorDownInRace(t *testing.T) {
	h := newHarness(t)
	tok := h.nodeToken("n1")
	hello := func(s *Server) (*structs.Node, error) {
		return s.RegisterAgentNode(h.ctx, &structs.Node{ID: "n1", RegisteredBy: tok.AccessorID, RootDir: "/var/lib/agent",
			Plugins: map[string]*structs.NodePlugin{testPlugin: {ExternalNodeID: "ext-n1", Endpoint: "unix:///var/lib/agent/csi.sock"}}})
	}
	if _, err := hello(h.srv); err != nil {
		t.Fatal(err)
	}

	// Control: without the race the operator's down holds over a hello.
	if _, err := h.srv.UpdateNodeStatus(h.ctx, "n1", structs.NodeDown); err != nil {
		t.Fatal(err)
	}
	if n, err := hello(h.srv); err != nil || n.Status != structs.NodeDown {
		t.Fatalf("control: hello after the operator's down: %+v, %v; want n1 still down", n, err)
	}
	if _, err := h.srv.UpdateNodeStatus(h.ctx, "n1", structs.NodeReady); err != nil {
		t.Fatal(err)
	}

	// The race: the operator's down commits between the hello's read and its commit.
	rl := &racingLog{Cluster: h.cluster, between: func() {
		if _, err := h.srv.UpdateNodeStatus(h.ctx, "n1", structs.NodeDown); err != nil {
			t.Errorf("operator marks n1 down: %v", err)
		}
		if n, _ := h.store.Snapshot().NodeByID(nil, "n1"); n == nil || n.Status != structs.NodeDown {
			t.Errorf("n1 after the operator's write: %+v", n)
		}
	}}
	racing := New(Config{Store: h.store, Log: rl, CSI: h.srv.csi, Clock: h.clock, Agents: h.agents})
	_, herr := hello(racing)
	n, err := h.store.Snapshot().NodeByID(nil, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.Status != structs.NodeDown {
		t.Errorf("n1's node token (no operator:write) undid the operator's down: hello err=%v, stored status=%q registered_by=%s; "+
			"want the hello refused or n1 kept down", herr, n.Status, n.RegisteredBy)
	}
}
