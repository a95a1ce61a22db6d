package nodeconn_test

import (
	"context"
	"errors"
	"testing"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// TestNodeWriteIsNotEveryNodesAgent: a token with `node { policy =
// "write" }` is what PUT /v1/allocs and PUT /v1/plugins need: a
// scheduler integration's, scoped to the namespaces it places workloads
// in (namespace:claim). It also passed the node RPC's check for every
// node, so with any client certificate of the CA (every operator's CLI
// has one) it connected as node1's agent: its stream replaced the real
// agent's, and the leader sent it NodeStage and NodePublish of node1's
// next claims, with their volumes' secrets, whatever their namespace,
// and took its word that NodeUnpublish was done. Being a node's agent is
// granted by a rule naming the node (node_id "node1", or a glob), or a
// management token; the node block alone grants the API's node routes.
func TestNodeWriteIsNotEveryNodesAgent(t *testing.T) {
	st := state.NewStore()
	idx := uint64(0)
	apply := func(mt structs.MessageType, req any) {
		t.Helper()
		idx++
		if _, err := st.Apply(idx, mt, req); err != nil {
			t.Fatal(err)
		}
	}
	secrets := map[string]string{}
	apply(structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: &structs.ACLToken{
		AccessorID: "boot", SecretHash: acl.HashSecret("00000000-0000-4000-8000-000000000000"), Type: structs.ACLManagementToken}})
	secrets["management"] = "00000000-0000-4000-8000-000000000000"
	for i, p := range []struct{ name, rules string }{
		{"scheduler", "node { policy = \"write\" }\nnamespace \"dev\" { policy = \"write\" }"},
		{"node1", `node_id "node1" { policy = "write" }`},
		{"nodes-glob", `node_id "node*" { policy = "write" }`},
		{"node1-and-block", "node { policy = \"write\" }\nnode_id \"node1\" { policy = \"write\" }"},
		{"node1-denied", "node { policy = \"write\" }\nnode_id \"node1\" { policy = \"deny\" }"},
	} {
		apply(structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Actor: "boot", Policies: []*structs.ACLPolicy{{Name: p.name, Rules: p.rules}}})
		secret := "00000000-0000-4000-8000-00000000000" + string(rune('1'+i))
		apply(structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Actor: "boot", Tokens: []*structs.ACLToken{{
			AccessorID: p.name, SecretHash: acl.HashSecret(secret), Type: structs.ACLClientToken, Policies: []string{p.name}}}})
		secrets[p.name] = secret
	}
	auth := nodeconn.ACLAuth(acl.NewResolver(st, nil))
	for _, tc := range []struct {
		token, node string
		ok          bool
	}{
		{"scheduler", "node1", false},
		{"node1", "node1", true},
		{"node1", "node2", false},
		{"nodes-glob", "node2", true},
		{"node1-and-block", "node1", true},
		{"node1-and-block", "node2", false},
		{"node1-denied", "node1", false},
		{"management", "node1", true},
	} {
		err := auth.Authorize(context.Background(), secrets[tc.token], tc.node)
		if tc.ok != (err == nil) {
			t.Errorf("token %s as the agent of %s: %v, want ok=%v", tc.token, tc.node, err, tc.ok)
		}
		if err != nil && !errors.Is(err, structs.ErrPermissionDenied) {
			t.Errorf("token %s as the agent of %s: %v, want a permission denial", tc.token, tc.node, err)
		}
	}
}
