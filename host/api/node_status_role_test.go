package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// TestSchedulerTokenCannotMarkANodeDown: a node's status set through the
// API is the operator's word that the node is down: the default policy
// then releases its claims without NodeUnpublish and NodeUnstage, as a
// fence does, and a fence needs operator:write. The status route needed
// node:write alone: a scheduler integration's token (node:write, write on
// dev only) marked node n1, running prod's workloads, down, and prod's
// claims there would be released skipping their node steps, the disk
// detached from under its mounts. Setting a node's status needs
// operator:write, as fencing it does.
func TestSchedulerTokenCannotMarkANodeDown(t *testing.T) {
	f := newACLFixture(t)
	if _, err := f.b.RegisterNode(context.Background(), &structs.Node{ID: "n1", Status: structs.NodeReady}); err != nil {
		t.Fatal(err)
	}
	f.policy(t, "scheduler", "node { policy = \"write\" }\nnamespace \"dev\" { policy = \"write\" }")
	f.policy(t, "node-operator", "node { policy = \"write\" }\noperator { policy = \"write\" }")
	sched, _ := f.token(t, "", "scheduler")
	op, _ := f.token(t, "", "node-operator")
	before := f.fingerprint(t)
	for _, st := range []string{"down", "ready"} {
		resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/node/n1/status", `{"status":"`+st+`"}`, api.TokenHeader, sched)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(out, "operator:write") {
			t.Errorf("scheduler token sets n1 %s: %d %s, want 403 naming operator:write", st, resp.StatusCode, out)
		}
	}
	if after := f.fingerprint(t); after != before {
		t.Fatal("a refused status changed the state")
	}
	if resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/node/n1/status", `{"status":"down"}`, api.TokenHeader, op); resp.StatusCode != http.StatusOK {
		t.Fatalf("operator: %d %s", resp.StatusCode, out)
	}
}
