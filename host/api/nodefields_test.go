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

// A node's own token registers only what its node observes: the mode,
// where the leader dials and makes directories, and the status fields
// are refused (403 naming operator:write and the field, nothing
// changed); the same body with operator:write is accepted.
func TestNodeTokenCannotSteerTheLeader(t *testing.T) {
	f := newACLFixture(t)
	f.policy(t, "n1", `node_id "n1" { policy = "write" }`)
	f.policy(t, "n1-operator", "node_id \"n1\" { policy = \"write\" }\noperator { policy = \"write\" }")
	node, _ := f.token(t, "", "n1")
	operator, _ := f.token(t, "", "n1-operator")
	for _, c := range []struct{ field, node string }{
		{"agent", `{"id":"n1","status":"ready","agent":false,"plugins":{"gce-pd":{"endpoint":"unix:///run/leader-only.sock"}}}`},
		{"plugins.gce-pd.endpoint", `{"id":"n1","status":"ready","plugins":{"gce-pd":{"endpoint":"unix:///run/leader-only.sock"}}}`},
		{"root_dir", `{"id":"n1","status":"ready","root_dir":"/etc"}`},
		{"status", `{"id":"n1","status":"down"}`},
		{"status_reason", `{"id":"n1","status":"ready","status_reason":"gone fishing"}`},
		{"status_since", `{"id":"n1","status":"ready","status_since":"2026-01-01T00:00:00Z"}`},
		{"heartbeat_lost", `{"id":"n1","status":"ready","heartbeat_lost":true}`},
		{"fence", `{"id":"n1","status":"ready","fence":{"reason":"off","source":"operator"}}`},
		{"agent", `{"id":"n1","status":"ready","agent":true}`},
	} {
		t.Run(c.field, func(t *testing.T) {
			before := f.fingerprint(t)
			resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/nodes", `{"node":`+c.node+`}`, api.TokenHeader, node)
			var er api.ErrorResponse
			_ = json.Unmarshal([]byte(out), &er)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(er.Error, "missing capability operator:write on node \"n1\"") ||
				!strings.Contains(er.Error, c.field) {
				t.Fatalf("node token: %d %s, want 403 naming operator:write and %s", resp.StatusCode, out, c.field)
			}
			if after := f.fingerprint(t); after != before {
				t.Fatalf("a refused registration changed the state:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	// What the node itself reports is accepted.
	if resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/nodes", `{"node":{"id":"n1","status":"ready","meta":{"rack":"r1"}}}`, api.TokenHeader, node); resp.StatusCode != http.StatusOK {
		t.Fatalf("node token, meta only: %d %s", resp.StatusCode, out)
	}
	// The operator decides the mode and directories.
	if resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/nodes", `{"node":{"id":"n1","root_dir":"/var/lib/volhost/n1","status":"ready"}}`, api.TokenHeader, operator); resp.StatusCode != http.StatusOK {
		t.Fatalf("operator token: %d %s", resp.StatusCode, out)
	}

	// A node its agent registered cannot be moved to direct mode by its
	// token over HTTP, even with no operator field in the body.
	if _, err := f.b.RegisterNode(context.Background(), &structs.Node{ID: "n1", Status: structs.NodeReady, Agent: true}); err != nil {
		t.Fatal(err)
	}
	before := f.fingerprint(t)
	resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/nodes", `{"node":{"id":"n1","status":"ready"}}`, api.TokenHeader, node)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(out, "registered by its node agent") {
		t.Fatalf("node token over its agent's node: %d %s", resp.StatusCode, out)
	}
	if after := f.fingerprint(t); after != before {
		t.Fatal("the refused re-registration changed the state")
	}
}
