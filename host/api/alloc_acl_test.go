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

// TestAllocWritesNeedTheirNamespace: PUT /v1/allocs writes an allocation
// in its namespace, so besides node:write it needs namespace:claim
// there, as Nomad scopes an allocation's lifecycle to its namespace.
// Before, any node:write token ended any namespace's allocation, and the
// watcher released its claims. A token that writes dev only cannot end
// default's allocation, not even by naming dev in the body (403 naming
// default, nothing changed); one that writes default can.
func TestAllocWritesNeedTheirNamespace(t *testing.T) {
	f := newACLFixture(t)
	ctx := context.Background()
	if _, err := f.b.RegisterNode(ctx, &structs.Node{ID: "n1", Status: structs.NodeReady}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.UpsertAllocs(ctx, []*structs.Alloc{{ID: "web-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning}}); err != nil {
		t.Fatal(err)
	}
	f.policy(t, "dev-writer", `node { policy = "write" }`+"\n"+`namespace "dev" { policy = "write" }`)
	f.policy(t, "default-writer", `node { policy = "write" }`+"\n"+`namespace "default" { policy = "write" }`)
	f.policy(t, "default-only", `namespace "default" { policy = "write" }`)
	dev, _ := f.token(t, "", "dev-writer")
	def, _ := f.token(t, "", "default-writer")
	nsOnly, _ := f.token(t, "", "default-only")
	end := func(ns string) string {
		return `{"allocs":[{"id":"web-1","namespace":"` + ns + `","node_id":"n1","client_status":"complete"}]}`
	}
	for _, tc := range []struct {
		name, token, body string
		status            int
		want              string // in the error
	}{
		{"dev writer ends default's allocation", dev, end("default"), http.StatusForbidden, `namespace:claim on namespace "default"`},
		{"dev writer names dev for default's allocation", dev, end("dev"), http.StatusForbidden, `namespace:claim on the namespace an allocation of the request is stored in`},
		{"dev writer with a batch reaching into default", dev,
			`{"allocs":[{"id":"job-1","namespace":"dev","node_id":"n1","client_status":"running"},{"id":"web-1","namespace":"default","node_id":"n1","client_status":"complete"}]}`,
			http.StatusForbidden, `namespace "default"`},
		{"default writer without node:write", nsOnly, end("default"), http.StatusForbidden, "node:write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.fingerprint(t)
			resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/allocs", tc.body, api.TokenHeader, tc.token)
			var er api.ErrorResponse
			_ = json.Unmarshal([]byte(out), &er)
			if resp.StatusCode != tc.status || !strings.Contains(er.Error, tc.want) {
				t.Fatalf("status %d, want %d naming %q: %s", resp.StatusCode, tc.status, tc.want, out)
			}
			if after := f.fingerprint(t); after != before {
				t.Fatal("a refused allocation write changed the state")
			}
		})
	}
	// Its own namespace: dev registers and ends dev's allocations.
	for _, st := range []string{"running", "complete"} {
		body := `{"allocs":[{"id":"job-1","namespace":"dev","node_id":"n1","client_status":"` + st + `"}]}`
		if resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/allocs", body, api.TokenHeader, dev); resp.StatusCode != http.StatusOK {
			t.Fatalf("dev writer, dev allocation %s: %d %s", st, resp.StatusCode, out)
		}
	}
	resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/allocs", end("default"), api.TokenHeader, def)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("default writer: %d %s", resp.StatusCode, out)
	}
	var a structs.Alloc
	if code := getJSON(t, f.ts.URL, "/v1/alloc/web-1", &a, api.TokenHeader, f.mgmt); code != http.StatusOK || a.ClientStatus != structs.AllocComplete {
		b, _ := json.Marshal(a)
		t.Fatalf("web-1 after the default writer ended it: %d %s", code, b)
	}
}
