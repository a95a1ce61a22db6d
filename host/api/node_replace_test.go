package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// TestNodeTokenCannotReplaceAnOperatorsNode: n1 runs in direct mode, as
// its operator registered it (plugin endpoint, root_dir), and the
// operator marked it down, an operator's word on which the default
// policy skips its claims' node steps and no claim is placed there. Its
// node-scoped token (node_id "n1" write) may not set any of that, and may
// not replace a node its agent registered; but it could replace this
// one: `PUT /v1/nodes {"node":{"id":"n1"}}` dropped the endpoint and the
// root_dir and made the node ready again, undoing three operator
// decisions at once. A registration by a caller without operator:write
// is now refused when the stored node holds an operator's setting, and
// the node is unchanged.
func TestNodeTokenCannotReplaceAnOperatorsNode(t *testing.T) {
	f := newACLFixture(t)
	ctx := context.Background()
	if _, err := f.b.RegisterNode(ctx, &structs.Node{ID: "n1", Status: structs.NodeReady, RootDir: "/var/lib/volhost/n1",
		Plugins: map[string]*structs.NodePlugin{"gce-pd": {PluginID: "gce-pd", Endpoint: "unix:///run/csi/gce-pd.sock"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.UpdateNodeStatus(ctx, "n1", structs.NodeDown); err != nil {
		t.Fatal(err)
	}
	f.policy(t, "n1", `node_id "n1" { policy = "write" }`)
	node, _ := f.token(t, "", "n1")
	for _, body := range []string{
		`{"node":{"id":"n1"}}`,
		`{"node":{"id":"n1","status":"ready","meta":{"rack":"r1"}}}`,
	} {
		before := f.fingerprint(t)
		resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/nodes", body, api.TokenHeader, node)
		var er api.ErrorResponse
		_ = json.Unmarshal([]byte(out), &er)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(er.Error, "operator:write") {
			t.Errorf("node token replacing the operator's n1 with %s: %d %s, want 403 naming operator:write", body, resp.StatusCode, out)
		}
		if after := f.fingerprint(t); after != before {
			t.Errorf("the registration changed the state")
		}
	}
	n, err := f.b.Store.Snapshot().NodeByID(nil, "n1")
	if err != nil || n == nil || n.Status != structs.NodeDown || n.RootDir == "" || n.Plugins["gce-pd"] == nil || n.Plugins["gce-pd"].Endpoint == "" {
		t.Fatalf("n1 after the node token's registrations: %+v", n)
	}
	// A node the token registers itself, holding nothing of an
	// operator's, it may register again.
	for i := 0; i < 2; i++ {
		if resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/nodes", `{"node":{"id":"n1x","status":"ready","meta":{"rack":"r1"}}}`, api.TokenHeader, f.mgmt); resp.StatusCode != http.StatusOK {
			t.Fatalf("management: %d %s", resp.StatusCode, out)
		}
	}
	f.policy(t, "n1x", `node_id "n1x" { policy = "write" }`)
	own, _ := f.token(t, "", "n1x")
	if resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/nodes", `{"node":{"id":"n1x","status":"ready","meta":{"rack":"r2"}}}`, api.TokenHeader, own); resp.StatusCode != http.StatusOK {
		t.Fatalf("node token re-registering a node with no operator setting: %d %s", resp.StatusCode, out)
	}
}
