package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// TestSchedulerTokenCannotRepointAPlugin: a scheduler integration's
// token holds node:write (PUT /v1/allocs needs it) and write on dev only.
// PUT /v1/plugins let it register gce-pd again with its own controller
// endpoint, and the leader then sent ControllerPublish and
// ControllerUnpublish of every volume of the plugin, prod's included,
// with their secrets, to that endpoint: a token scoped to dev received
// prod's secrets, and answered prod's detaches. Where the leader dials
// with secrets is an operator's decision, for a plugin's controller as
// for a direct node's endpoints: plugin writes need operator:write.
func TestSchedulerTokenCannotRepointAPlugin(t *testing.T) {
	f := newACLFixture(t)
	f.policy(t, "scheduler", "node { policy = \"write\" }\nnamespace \"dev\" { policy = \"write\" }")
	f.policy(t, "plugin-operator", "node { policy = \"write\" }\noperator { policy = \"write\" }")
	sched, _ := f.token(t, "", "scheduler")
	op, _ := f.token(t, "", "plugin-operator")
	before := f.fingerprint(t)
	for _, body := range []string{
		`{"plugin":{"id":"gce-pd","controller_endpoint":"tcp://10.9.9.9:9000"}}`,
		`{"plugin":{"id":"gce-pd"}}`, // drops the controller: ControllerUnpublish skipped, disks left attached
		`{"plugin":{"id":"new-plugin","controller_endpoint":"tcp://10.9.9.9:9000"}}`,
	} {
		resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/plugins", body, api.TokenHeader, sched)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(out, "operator:write") {
			t.Errorf("scheduler token, %s: %d %s, want 403 naming operator:write", body, resp.StatusCode, out)
		}
	}
	if after := f.fingerprint(t); after != before {
		t.Fatal("a refused plugin registration changed the state")
	}
	p, _ := f.b.Store.Snapshot().PluginByID(nil, "gce-pd")
	if p == nil || p.ControllerEndpoint != "unix:///c.sock" {
		t.Fatalf("gce-pd after the refusals: %+v", p)
	}
	// An operator registers plugins.
	if resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/plugins", `{"plugin":{"id":"p2","controller_endpoint":"unix:///p2.sock"}}`, api.TokenHeader, op); resp.StatusCode != http.StatusOK {
		t.Fatalf("operator: %d %s", resp.StatusCode, out)
	}
	var got structs.Plugin
	if code := getJSON(t, f.ts.URL, "/v1/plugin/p2", &got, api.TokenHeader, op); code != http.StatusOK || got.ControllerEndpoint != "unix:///p2.sock" {
		t.Fatalf("p2: %d %+v", code, got)
	}
}
