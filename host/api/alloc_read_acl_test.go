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

// allocReadFixture is an ACL'd server with web-1 in default and db-1 in
// prod, both on n1.
func allocReadFixture(t *testing.T, wrap func(api.Store) api.Store) *aclFixture {
	t.Helper()
	f := newACLFixtureWith(t, wrap)
	ctx := context.Background()
	if _, err := f.b.RegisterNode(ctx, &structs.Node{ID: "n1", Status: structs.NodeReady}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.UpsertAllocs(ctx, []*structs.Alloc{
		{ID: "web-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning},
		{ID: "db-1", Namespace: "prod", NodeID: "n1", ClientStatus: structs.AllocRunning},
	}); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAllocReadsAreNamespaceScoped: an allocation is read like the
// volumes of its namespace. GET /v1/allocs and GET /v1/alloc/ID needed
// node:read alone and showed every namespace's allocations (their jobs,
// nodes and status) to a token that may read none of them. Now each
// needs namespace:read on the allocation's namespace besides node:read:
// the list across namespaces needs read on every namespace as the volume
// list does, ?namespace= asks for one, and an allocation of a namespace
// the token may not read answers exactly as one that does not exist.
func TestAllocReadsAreNamespaceScoped(t *testing.T) {
	f := allocReadFixture(t, nil)
	f.policy(t, "default-reader", `node { policy = "read" }`+"\n"+`namespace "default" { policy = "read" }`)
	f.policy(t, "all-reader", `node { policy = "read" }`+"\n"+`namespace "*" { policy = "read" }`)
	f.policy(t, "node-reader", `node { policy = "read" }`)
	f.policy(t, "ns-reader", `namespace "*" { policy = "read" }`)
	def, _ := f.token(t, "", "default-reader")
	all, _ := f.token(t, "", "all-reader")
	nodeOnly, _ := f.token(t, "", "node-reader")
	nsOnly, _ := f.token(t, "", "ns-reader")
	for _, tc := range []struct {
		name, token, path string
		status            int
		want              []string // in the body
	}{
		{"list across namespaces, one readable", def, "/v1/allocs", 403, []string{"namespace:read on every namespace"}},
		{"list of one node across namespaces", def, "/v1/allocs?node_id=n1", 403, []string{"namespace:read on every namespace"}},
		{"list of its namespace", def, "/v1/allocs?namespace=default", 200, []string{`"web-1"`}},
		{"list of another namespace", def, "/v1/allocs?namespace=prod", 403, []string{`namespace:read on namespace "prod"`}},
		{"list with node:read alone", nodeOnly, "/v1/allocs", 403, []string{"namespace:read on every namespace"}},
		{"list with namespace read alone", nsOnly, "/v1/allocs", 403, []string{"node:read"}},
		{"list of every namespace", all, "/v1/allocs", 200, []string{`"web-1"`, `"db-1"`}},
		{"one of its namespace", def, "/v1/alloc/web-1", 200, []string{`"web-1"`}},
		{"one of its namespace, named", def, "/v1/alloc/web-1?namespace=default", 200, []string{`"web-1"`}},
		{"one of another namespace", def, "/v1/alloc/db-1", 403, []string{"namespace:read on every namespace"}},
		{"one that does not exist", def, "/v1/alloc/nope", 403, []string{"namespace:read on every namespace"}},
		{"one of another namespace, asked in its own", def, "/v1/alloc/db-1?namespace=default", 404, []string{`allocation "db-1" does not exist`}},
		{"one of another namespace, named", def, "/v1/alloc/db-1?namespace=prod", 403, []string{`namespace:read on namespace "prod"`}},
		{"one with node:read alone", nodeOnly, "/v1/alloc/web-1", 403, []string{`namespace:read on every namespace`}},
		{"one with namespace read alone", nsOnly, "/v1/alloc/web-1", 403, []string{"node:read"}},
		{"one of another namespace, reading all", all, "/v1/alloc/db-1", 200, []string{`"db-1"`}},
		{"one that does not exist, reading all", all, "/v1/alloc/nope", 404, []string{`allocation "nope" does not exist`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, http.MethodGet, f.ts.URL+tc.path, "", api.TokenHeader, tc.token)
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tc.status)
			}
			var er api.ErrorResponse
			_ = json.Unmarshal([]byte(body), &er)
			for _, w := range tc.want {
				if !strings.Contains(body, w) && !strings.Contains(er.Error, w) {
					t.Fatalf("%s does not say %s", body, w)
				}
			}
			if tc.token != all && tc.path != "/v1/alloc/db-1?namespace=prod" && tc.path != "/v1/allocs?namespace=prod" &&
				(strings.Contains(body, "prod") || strings.Contains(body, "db-1") && resp.StatusCode == 200) {
				t.Fatalf("a token that may not read prod learns of it: %s", body)
			}
		})
	}
	// A prod allocation and a missing one are refused alike: nothing in
	// the answer says which exists.
	_, a := do(t, http.MethodGet, f.ts.URL+"/v1/alloc/db-1", "", api.TokenHeader, def)
	_, b := do(t, http.MethodGet, f.ts.URL+"/v1/alloc/nope", "", api.TokenHeader, def)
	if a != b {
		t.Fatalf("an allocation of prod and a missing one answer apart:\n%s\n%s", a, b)
	}
	// The CLI's allocation list and status ask through the same routes.
	var out []*structs.Alloc
	if code := getJSON(t, f.ts.URL, "/v1/allocs?namespace=default", &out, api.TokenHeader, def); code != 200 ||
		len(out) != 1 || out[0].ID != "web-1" {
		t.Fatalf("default's list: %d %+v", code, out)
	}
}

// A blocking allocation read waiting when its token loses the namespace
// ends with 403 and shows nothing of what it may no longer read, as a
// blocking volume read does: the rule is checked again when the policy
// changes, and each run of the read filters by the policy as it is then.
func TestBlockingAllocReadsReResolveTheACL(t *testing.T) {
	for _, path := range []string{"/v1/alloc/web-1", "/v1/allocs?namespace=default"} {
		t.Run(path, func(t *testing.T) {
			g := &gatedStore{woke: make(chan struct{}), release: make(chan struct{})}
			f := allocReadFixture(t, func(s api.Store) api.Store { g.Store = s; return g })
			f.policy(t, "p", `node { policy = "read" }`+"\n"+`namespace "default" { policy = "read" }`)
			secret, _ := f.token(t, "", "p")
			resp, body := do(t, http.MethodGet, f.ts.URL+path, "", api.TokenHeader, secret)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("before: %d %s", resp.StatusCode, body)
			}
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			got := getInBackground(f.ts.URL+path+sep+"index="+resp.Header.Get(api.IndexHeader)+"&wait=10m", secret)
			var a answer
			select {
			case <-g.woke:
				// Authorized and running: the policy loses default, and
				// web-1 changes before the query's next run.
				f.policy(t, "p", `node { policy = "read" }`+"\n"+`namespace "dev" { policy = "read" }`)
				if _, err := f.b.UpsertAllocs(context.Background(), []*structs.Alloc{
					{ID: "web-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete}}); err != nil {
					t.Fatal(err)
				}
				close(g.release)
				a = <-got
			case a = <-got:
				t.Fatalf("the query answered before any change: %d %s", a.code, a.body)
			}
			if a.code != http.StatusForbidden || strings.Contains(a.body, "web-1") {
				t.Fatalf("the waiting query answered %d %s, want 403 showing nothing", a.code, a.body)
			}
		})
	}
}
