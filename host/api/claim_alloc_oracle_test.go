package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
)

// TestClaimNamesNoAllocationOfAnotherNamespace: a token that may claim
// in default only names, in a claim of a default volume, the ID of an
// allocation of prod. The store refused it, but its refusal said where
// that allocation runs ("allocation db-1 runs on node n1, not n9") and in
// which namespace ("is in namespace prod"), while an ID that exists
// nowhere answered 404: a claim token probed the IDs, nodes and
// namespaces of allocations it may not read, which GET /v1/alloc/ID
// refuses to show it. An allocation of another namespace is now refused
// at commit exactly as one that does not exist, and nothing is written.
func TestClaimNamesNoAllocationOfAnotherNamespace(t *testing.T) {
	f := allocReadFixture(t, nil)
	f.policy(t, "claimer", `namespace "default" { capabilities = ["read", "claim"] }`)
	claimer, _ := f.token(t, "", "claimer")
	before := f.fingerprint(t)
	claim := func(alloc, node string) (int, string) {
		resp, body := do(t, http.MethodPut, f.ts.URL+"/v1/volume/v1/claim",
			`{"alloc_id":"`+alloc+`","node_id":"`+node+`","mode":"write"}`, api.TokenHeader, claimer)
		return resp.StatusCode, body
	}
	for _, node := range []string{"n1", "n9"} {
		code, prod := claim("db-1", node)
		codeNone, none := claim("nope", node)
		if code == http.StatusOK {
			t.Fatalf("claim for prod's allocation on %s was taken: %s", node, prod)
		}
		if strings.Contains(prod, "prod") || strings.Contains(prod, `"n1"`) && node != "n1" {
			t.Errorf("the refusal on %s names what only prod's readers may see: %d %s", node, code, prod)
		}
		if code != codeNone || strings.ReplaceAll(prod, "db-1", "X") != strings.ReplaceAll(none, "nope", "X") {
			t.Errorf("an allocation of prod and one that does not exist answer apart on %s:\n%d %s\n%d %s", node, code, prod, codeNone, none)
		}
	}
	if after := f.fingerprint(t); after != before {
		t.Fatalf("a refused claim changed the state:\n%s\n%s", before, after)
	}
}
