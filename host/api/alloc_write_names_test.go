package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
)

// TestAllocWriteDenialNamesNoOtherNamespace: a token that may write
// allocations in default only (node:write, namespace write on default)
// names, in PUT /v1/allocs, prod's allocation db-1 as one of default. The
// write is refused (it would end prod's allocation, and its claims would
// be released), but the 403 said `namespace:claim on namespace "prod"`:
// where db-1 is, a namespace the token may not read, which GET
// /v1/alloc/ID refuses to show it. The denial names the namespaces the
// request named, and only says of a stored one that the token may not
// claim where an allocation it names is stored.
func TestAllocWriteDenialNamesNoOtherNamespace(t *testing.T) {
	f := allocReadFixture(t, nil)
	f.policy(t, "default-writer", `node { policy = "write" }`+"\n"+`namespace "default" { policy = "write" }`)
	def, _ := f.token(t, "", "default-writer")
	before := f.fingerprint(t)
	for _, body := range []string{
		`{"allocs":[{"id":"db-1","namespace":"default","node_id":"n1","client_status":"complete"}]}`,
		`{"allocs":[{"id":"db-1","node_id":"n1","client_status":"complete"}]}`,
		`{"allocs":[{"id":"web-2","namespace":"default","node_id":"n1","client_status":"running"},{"id":"db-1","namespace":"default","node_id":"n1","client_status":"complete"}]}`,
	} {
		resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/allocs", body, api.TokenHeader, def)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: %d %s, want 403", body, resp.StatusCode, out)
		}
		if strings.Contains(out, "prod") {
			t.Errorf("the denial names the namespace of an allocation the token may not read: %s", out)
		}
		if !strings.Contains(out, "namespace:claim") {
			t.Errorf("the denial does not say what is missing: %s", out)
		}
	}
	// A namespace the request names itself is named back.
	resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/allocs",
		`{"allocs":[{"id":"db-1","namespace":"prod","node_id":"n1","client_status":"complete"}]}`, api.TokenHeader, def)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(out, `namespace:claim on namespace \"prod\"`) {
		t.Fatalf("naming prod: %d %s", resp.StatusCode, out)
	}
	if after := f.fingerprint(t); after != before {
		t.Fatal("a refused allocation write changed the state")
	}
}
