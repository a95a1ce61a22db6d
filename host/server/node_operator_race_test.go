package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// A node token's registration that reaches the store after its check
// (the API's checkNodeRegistration, the node RPC's keepOperatorNode) was
// passed on a state without the operator's direct-mode node is refused
// when it commits over that node, either way: the operator's endpoint and
// root_dir stay, so its steps are not sent to an agent's stream. Here the checks
// are behind it, as when the operator's registration committed between
// them and the write; the token is the node's own.
func TestNodeTokenRegistrationAfterItsCheckKeepsTheOperatorsNode(t *testing.T) {
	h := newHarness(t, "node1") // node1: registered by the operator, direct mode, with an endpoint
	tok := h.nodeToken("node1")
	before, err := h.store.Snapshot().NodeByID(nil, "node1")
	if err != nil || before == nil || before.Agent || before.Plugins[testPlugin].Endpoint == "" {
		t.Fatalf("node1 = %+v (%v), want the operator's direct node", before, err)
	}
	register := map[string]func(*structs.Node) (*structs.Node, error){
		"api":   func(n *structs.Node) (*structs.Node, error) { return h.srv.RegisterNode(h.ctx, n) },
		"agent": func(n *structs.Node) (*structs.Node, error) { return h.srv.RegisterAgentNode(h.ctx, n) },
	}
	for way, reg := range register {
		n := &structs.Node{ID: "node1", RegisteredBy: tok.AccessorID,
			Plugins: map[string]*structs.NodePlugin{testPlugin: {ExternalNodeID: "ext-node1"}}}
		if way == "agent" {
			n.RootDir = "/var/lib/agent"
			n.Plugins[testPlugin].Endpoint = "unix:///var/lib/agent/csi.sock"
		}
		_, err := reg(n)
		if !errors.Is(err, structs.ErrPermissionDenied) || !strings.Contains(err.Error(), tok.AccessorID) {
			t.Errorf("%s registration by node1's token over the operator's node: %v, want permission denied naming the token", way, err)
		}
		after, err := h.store.Snapshot().NodeByID(nil, "node1")
		if err != nil {
			t.Fatal(err)
		}
		if after.ModifyIndex != before.ModifyIndex || after.Agent || after.RootDir != before.RootDir ||
			after.Plugins[testPlugin].Endpoint != before.Plugins[testPlugin].Endpoint {
			t.Errorf("%s registration changed node1: %+v, want %+v", way, after, before)
		}
	}
}

// nodeToken bootstraps ACLs on h's cluster and answers a token scoped to
// node (node_id "<node>" { policy = "write" }): a node agent's, without
// operator:write.
func (h *harness) nodeToken(node string) *structs.ACLToken {
	h.t.Helper()
	svc := acl.NewService(h.store, h.cluster, nil)
	boot, _, err := svc.Bootstrap(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := svc.UpsertPolicy(h.ctx, boot.AccessorID, &structs.ACLPolicy{Name: node, Rules: `node_id "` + node + `" { policy = "write" }`}); err != nil {
		h.t.Fatal(err)
	}
	tok, _, err := svc.CreateToken(h.ctx, boot.AccessorID, acl.NewToken{Name: node, Policies: []string{node}})
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}
