package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/structs"
)

// auditTrail maps each audit event's action to its accessor.
func auditTrail(t *testing.T, b *apitest.StoreBackend) map[string]string {
	t.Helper()
	evs, err := b.Store.Snapshot().Events(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range evs {
		if e.Type == structs.EventAudit {
			got[e.Fields["action"]] = e.Fields["accessor"]
		}
	}
	return got
}

// With ACLs off a privileged action is audited all the same, as
// "anonymous": a force deregister used to leave no trace in the audit
// trail. A refused action (here a deregister of a missing volume) records
// nothing, and an ordinary read or write is not a privileged action.
func TestAuditWithoutACL(t *testing.T) {
	b := apitest.NewStoreBackend()
	ctx := context.Background()
	if _, err := b.RegisterPlugin(ctx, &structs.Plugin{ID: "gce-pd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RegisterVolumes(ctx, []*structs.Volume{testVolume("v1")}); err != nil {
		t.Fatal(err)
	}
	ts := apitest.Serve(t, b)
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/volumes", 200},
		{"DELETE", "/v1/volume/missing?force=true", 404},
		{"PUT", "/v1/system/gc", 200},
		{"DELETE", "/v1/volume/v1?force=true", 200},
	} {
		if resp, out := do(t, c.method, ts.URL+c.path, "", "Content-Type", "application/json"); resp.StatusCode != c.status {
			t.Fatalf("%s %s: %d %s", c.method, c.path, resp.StatusCode, out)
		}
	}
	got := auditTrail(t, b)
	want := map[string]string{"force-deregister": "anonymous", "system-gc": "anonymous"}
	if len(got) != len(want) {
		t.Errorf("audit trail %v, want %v", got, want)
	}
	for action, acc := range want {
		if got[action] != acc {
			t.Errorf("audit %q: accessor %q, want %q (all: %v)", action, got[action], acc, got)
		}
	}
}

// The server without an audit log configured still serves privileged
// routes with ACLs off (the log line is the record).
func TestAuditWithoutLog(t *testing.T) {
	b := apitest.NewStoreBackend()
	srv := api.NewServer(api.Config{}, b.Store, b, nil)
	req, _ := http.NewRequest("PUT", "/v1/system/gc", nil)
	req.Host = "127.0.0.1"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got := auditTrail(t, b); len(got) != 0 {
		t.Fatalf("audit events without an audit log: %v", got)
	}
}

// With ACLs on, a request without a token is told so and how to send one,
// for an API caller in HTTP terms; a request with a token is not.
func TestDenialNamesMissingToken(t *testing.T) {
	f := newACLFixture(t)
	resp, out := do(t, "GET", f.ts.URL+"/v1/volumes", "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(out, api.HintNoToken) || !strings.Contains(out, "namespace:read on every namespace") {
		t.Errorf("no token: %d %s", resp.StatusCode, out)
	}
	f.policy(t, "none", `node { policy = "read" }`)
	secret, _ := f.token(t, "", "none")
	resp, out = do(t, "GET", f.ts.URL+"/v1/volumes", "", api.TokenHeader, secret)
	if resp.StatusCode != http.StatusForbidden || strings.Contains(out, "no token was sent") {
		t.Errorf("with a token: %d %s", resp.StatusCode, out)
	}
}

// DELETE /v1/node/ID and /v1/plugin/ID need operator:write (a node
// agent's node:write is not enough), refuse what is in use with a 409
// naming it, and are audited.
func TestNodeAndPluginDeregisterRoutes(t *testing.T) {
	f := newACLFixture(t)
	ctx := context.Background()
	if _, err := f.b.RegisterNode(ctx, &structs.Node{ID: "n1", Status: structs.NodeReady}); err != nil {
		t.Fatal(err)
	}
	f.policy(t, "agent", `node { policy = "write" }`)
	agent, _ := f.token(t, "", "agent")
	for _, path := range []string{"/v1/node/n1", "/v1/plugin/gce-pd"} {
		if resp, out := do(t, "DELETE", f.ts.URL+path, "", api.TokenHeader, agent); resp.StatusCode != http.StatusForbidden || !strings.Contains(out, "operator:write") {
			t.Errorf("DELETE %s with node:write: %d %s", path, resp.StatusCode, out)
		}
	}
	if resp, out := do(t, "DELETE", f.ts.URL+"/v1/plugin/gce-pd", "", api.TokenHeader, f.mgmt); resp.StatusCode != http.StatusConflict || !strings.Contains(out, "default/v1") {
		t.Errorf("plugin in use: %d %s", resp.StatusCode, out)
	}
	if resp, out := do(t, "DELETE", f.ts.URL+"/v1/node/n1?force=maybe", "", api.TokenHeader, f.mgmt); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad force: %d %s", resp.StatusCode, out)
	}
	resp, out := do(t, "DELETE", f.ts.URL+"/v1/node/n1", "", api.TokenHeader, f.mgmt)
	if resp.StatusCode != http.StatusOK || !strings.Contains(out, `"skipped_node_steps": []`) {
		t.Errorf("node deregister: %d %s", resp.StatusCode, out)
	}
	if got := auditTrail(t, f.b); got["node-deregister"] == "" || got["plugin-deregister"] != "" {
		t.Errorf("audit trail %v: want node-deregister only (the refused plugin deregister is not audited)", got)
	}
}

// Registering a plugin or a node through the API decides where volume
// secrets go: the controller endpoint receives ControllerPublish and
// ControllerUnpublish with them, a directly driven node's endpoints
// NodeStage and NodePublish. Each is a privileged action, audited with
// the accessor of the token that asked (a node agent registers over its
// own stream, where the node row keeps its accessor instead).
func TestWhereSecretsGoIsAudited(t *testing.T) {
	f := newACLFixture(t)
	f.policy(t, "p", `node { policy = "write" }
operator { policy = "write" }`)
	secret, accessor := f.token(t, "", "p")
	for _, c := range []struct{ path, body string }{
		{"/v1/plugins", `{"plugin":{"id":"gce-pd","controller_endpoint":"tcp://10.9.9.9:9000"}}`},
		{"/v1/nodes", `{"node":{"id":"n9","status":"ready","plugins":{"gce-pd":{"plugin_id":"gce-pd","endpoint":"tcp://10.9.9.9:9001"}}}}`},
	} {
		if resp, out := do(t, http.MethodPut, f.ts.URL+c.path, c.body, api.TokenHeader, secret, "Content-Type", "application/json"); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", c.path, resp.StatusCode, out)
		}
	}
	got := auditTrail(t, f.b)
	for _, action := range []string{"plugin-register", "node-register"} {
		if got[action] != accessor {
			t.Errorf("audit %q: accessor %q, want %q (all: %v)", action, got[action], accessor, got)
		}
	}
}
