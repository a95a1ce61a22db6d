package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/kit"
)

// fakeModules counts reloads.
type fakeModules struct {
	mu      sync.Mutex
	reloads int
	limit   int // the last ModuleInfo's limit
	// reloadTakes makes a reload last this long, like a cold compile.
	reloadTakes time.Duration
}

func (f *fakeModules) ModuleStatuses() ([]plugins.Status, error) {
	return []plugins.Status{leakyStatus("m1")}, nil
}

// leakyStatus is a module status whose texts name volumes of two
// namespaces: a fault in prod, one in default, one about no volume, and
// a shadow disagreement in prod.
func leakyStatus(name string) plugins.Status {
	return plugins.Status{Name: name,
		RecentFaults: []plugins.RecentFault{
			{Kind: "guest-error", Message: "guest: cannot decide prod/secret-vol", Namespace: "prod", VolumeID: "secret-vol"},
			{Kind: "guest-error", Message: "guest: cannot decide default/v1", Namespace: "default", VolumeID: "v1"},
			{Kind: "timeout", Message: "call_timeout exceeded"},
		},
		Shadow: &plugins.ShadowStatus{LastDisagreement: "volume prod/secret-vol2: decide_release: ...", LastDisagreementNamespace: "prod"},
	}
}
func (f *fakeModules) ModuleInfo(name string, limit int) (*api.ModuleInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = limit
	if name == "m1" {
		return &api.ModuleInfo{Status: leakyStatus(name), ServedVolumeCount: 3, ServedPlugins: []string{"gce-pd"},
			ServedVolumes: []structs.VolumeRef{{Namespace: "default", ID: "v1"}, {Namespace: "prod", ID: "secret-vol"}, {Namespace: "prod", ID: "secret-vol2"}}}, nil
	}
	return nil, structs.NotFound("module", name)
}
func (f *fakeModules) ModuleView(ns, id, _, _ string) (*kit.Recording, error) {
	return nil, structs.NotFound("volume", ns+"/"+id)
}
func (f *fakeModules) PromoteModule(_ context.Context, name string, _ plugins.PromoteOptions) (plugins.Status, error) {
	return plugins.Status{}, structs.NotFound("module", name)
}
func (f *fakeModules) DiscardShadow(_ context.Context, name string) (plugins.Status, error) {
	return plugins.Status{Name: name}, nil
}
func (f *fakeModules) RollbackModule(_ context.Context, name string) (plugins.Status, error) {
	return plugins.Status{}, structs.NotFound("module", name)
}
func (f *fakeModules) ShadowModule(_ context.Context, name string, _, _ []byte) (plugins.Status, error) {
	return plugins.Status{}, structs.NotFound("module", name)
}
func (f *fakeModules) ReloadModules(context.Context) ([]plugins.Status, error) {
	if f.reloadTakes > 0 {
		<-time.After(f.reloadTakes)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloads++
	return nil, nil
}

type aclFixture struct {
	ts   *httptest.Server
	b    *apitest.StoreBackend
	svc  *acl.Service
	clk  *clockwork.FakeClock
	op   *fakeOp
	mods *fakeModules
	mgmt string
}

func newACLFixture(t *testing.T) *aclFixture {
	t.Helper()
	return newACLFixtureWith(t, nil)
}

// newACLFixtureWith is newACLFixture with the API reading through
// wrap(store) (nil: the store itself).
func newACLFixtureWith(t *testing.T, wrap func(api.Store) api.Store) *aclFixture {
	t.Helper()
	f := &aclFixture{b: apitest.NewStoreBackend(), clk: clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		op: &fakeOp{id: "s1", leader: true}, mods: &fakeModules{}}
	f.b.Now = f.clk.Now
	f.svc = acl.NewService(f.b.Store, f.b, f.clk)
	var store api.Store = api.StateStore(f.b.Store)
	if wrap != nil {
		store = wrap(store)
	}
	s := api.New(api.Config{}, store, f.b, nil)
	s.EnableCluster(f.op)
	s.EnableModules(f.mods)
	s.EnableACL(api.ACLConfig{Service: f.svc, Audit: f.b})
	f.ts = httptest.NewServer(s.Handler())
	t.Cleanup(f.ts.Close)

	resp, body := do(t, http.MethodPost, f.ts.URL+"/v1/acl/bootstrap", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("bootstrap: %d %s", resp.StatusCode, body)
	}
	var boot api.ACLTokenSecret
	if err := json.Unmarshal([]byte(body), &boot); err != nil {
		t.Fatal(err)
	}
	f.mgmt = boot.SecretID
	// Something to act on: a plugin, a node, a volume in "default".
	ctx := context.Background()
	if _, err := f.b.RegisterPlugin(ctx, &structs.Plugin{ID: "gce-pd", ControllerEndpoint: "unix:///c.sock"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.RegisterVolumes(ctx, []*structs.Volume{testVolume("v1")}); err != nil {
		t.Fatal(err)
	}
	return f
}

// policy applies a policy as the management token.
func (f *aclFixture) policy(t *testing.T, name, rules string) {
	t.Helper()
	body, _ := json.Marshal(api.ACLPolicyRequest{Rules: rules})
	resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/acl/policy/"+name, string(body), api.TokenHeader, f.mgmt)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("apply policy %s: %d %s", name, resp.StatusCode, out)
	}
}

// token creates a client token with the policies and returns its secret
// and accessor.
func (f *aclFixture) token(t *testing.T, ttl string, policies ...string) (secret, accessor string) {
	t.Helper()
	body, _ := json.Marshal(api.ACLTokenRequest{Name: "t", Policies: policies, TTL: ttl})
	resp, out := do(t, http.MethodPut, f.ts.URL+"/v1/acl/token", string(body), api.TokenHeader, f.mgmt)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create token: %d %s", resp.StatusCode, out)
	}
	var tok api.ACLTokenSecret
	if err := json.Unmarshal([]byte(out), &tok); err != nil {
		t.Fatal(err)
	}
	return tok.SecretID, tok.AccessorID
}

// fingerprint is everything a request could change: the whole state
// (tokens and events included), the raft joins and restores and the
// module reloads.
func (f *aclFixture) fingerprint(t *testing.T) string {
	t.Helper()
	d, err := f.b.Store.Digest()
	if err != nil {
		t.Fatal(err)
	}
	f.op.mu.Lock()
	joins, restored := len(f.op.joins), string(f.op.restored)
	f.op.mu.Unlock()
	f.mods.mu.Lock()
	reloads := f.mods.reloads
	f.mods.mu.Unlock()
	return strings.Join([]string{d, string(rune('0' + joins)), restored, string(rune('0' + reloads))}, "|")
}

const joinBody = `{"id":"evil","raft_addr":"10.9.9.9:4748","cluster_id":"cluster-1","version":1}`

// aclCases is one request per capability and endpoint class, the
// capability it needs, a policy that grants it and (where one exists) a
// policy one step short of it.
var aclCases = []struct {
	name, method, path, body string
	want                     string // in the denial
	grant, weaker            string
}{
	{"volume read", "GET", "/v1/volume/v1", "", `namespace:read on namespace "default"`,
		`namespace "default" { capabilities = ["read"] }`, `namespace "default" { capabilities = ["claim"] }`},
	{"volume list across namespaces", "GET", "/v1/volumes", "", "namespace:read on every namespace",
		`namespace "*" { policy = "read" }`, `namespace "default" { policy = "read" }`},
	{"volume register", "PUT", "/v1/volumes", `{"volumes":[{"id":"v9","namespace":"prod","external_id":"d","plugin_id":"gce-pd","access_mode":"single-node-writer","attachment_mode":"file-system"}]}`,
		`namespace:register on namespace "prod"`, `namespace "prod" { capabilities = ["register"] }`, `namespace "default" { policy = "write" }`},
	{"volume claim", "PUT", "/v1/volume/v1/claim", `{"alloc_id":"a1","node_id":"n1","mode":"write"}`,
		`namespace:claim on namespace "default"`, `namespace "default" { capabilities = ["claim"] }`, `namespace "default" { policy = "read" }`},
	{"volume detach", "PUT", "/v1/volume/v1/detach?node=n1", "", `namespace:detach on namespace "default"`,
		`namespace "default" { capabilities = ["detach"] }`, `namespace "default" { capabilities = ["read", "claim"] }`},
	{"volume deregister", "DELETE", "/v1/volume/v1", "", `namespace:deregister on namespace "default"`,
		`namespace "default" { capabilities = ["deregister"] }`, `namespace "default" { capabilities = ["read", "detach"] }`},
	{"volume force deregister", "DELETE", "/v1/volume/v1?force=true", "", `namespace:force-deregister on namespace "default"`,
		`namespace "default" { capabilities = ["force-deregister"] }`, `namespace "default" { policy = "write" }`},
	{"module view holds nodes", "GET", "/v1/volume/v1/module-view", "", "node:read",
		"namespace \"default\" { policy = \"read\" }\nnode { policy = \"read\" }", `namespace "default" { policy = "read" }`},
	{"node read", "GET", "/v1/nodes", "", "node:read", `node { policy = "read" }`, `operator { policy = "write" }`},
	{"node write", "PUT", "/v1/node/n1/status", `{"status":"down"}`, "node:write",
		"node { policy = \"write\" }\noperator { policy = \"write\" }", "node { policy = \"read\" }\noperator { policy = \"write\" }"},
	{"alloc write", "PUT", "/v1/allocs", `{"allocs":[{"id":"a1","node_id":"n1","client_status":"running"}]}`, "node:write",
		`node { policy = "write" }` + "\n" + `namespace "default" { capabilities = ["claim"] }`, `node { policy = "read" }`},
	// An allocation is also written in its namespace: TestAllocWritesNeedTheirNamespace.
	// Node-scoped tokens (a node agent writes its own node only).
	// A node's status is the operator's word: its own node_id rule does
	// not grant it (the agent heartbeats instead).
	{"node status needs every node", "PUT", "/v1/node/n1/status", `{"status":"down"}`, "node:write",
		"node { policy = \"write\" }\noperator { policy = \"write\" }", "node_id \"n1\" { policy = \"write\" }\noperator { policy = \"write\" }"},
	{"node register scoped", "PUT", "/v1/nodes", `{"node":{"id":"n1"}}`, `node:write on node "n1"`,
		`node_id "n1" { policy = "write" }`, `node_id "n1" { policy = "read" }`},
	{"plugin write needs every node", "PUT", "/v1/plugins", `{"plugin":{"id":"p3"}}`, "node:write",
		"node { policy = \"write\" }\noperator { policy = \"write\" }", "node_id \"*\" { policy = \"write\" }\noperator { policy = \"write\" }"},
	{"plugin write", "PUT", "/v1/plugins", `{"plugin":{"id":"p2"}}`, "node:write",
		"node { policy = \"write\" }\noperator { policy = \"write\" }", "node { policy = \"read\" }\noperator { policy = \"write\" }"},
	{"events read", "GET", "/v1/events", "", "events:read", `events { policy = "read" }`, `node { policy = "write" }`},
	{"system gc", "PUT", "/v1/system/gc", "", "operator:write", `operator { policy = "write" }`, `operator { policy = "read" }`},
	{"leftovers clear", "DELETE", "/v1/volumes/leftovers?all=true", "", "operator:write", `operator { policy = "write" }`, `operator { policy = "read" }`},
	{"metrics", "GET", "/v1/metrics", "", "operator:read", `operator { policy = "read" }`, `node { policy = "write" }`},
	{"raft configuration", "GET", "/v1/operator/raft/configuration", "", "operator:read", `operator { policy = "read" }`, `node { policy = "write" }`},
	{"raft digest", "GET", "/v1/operator/raft/digest", "", "operator:read", `operator { policy = "read" }`, `node { policy = "write" }`},
	{"raft remove-peer", "DELETE", "/v1/operator/raft/peer?id=s2", "", "operator:write", `operator { policy = "write" }`, `operator { policy = "read" }`},
	{"raft transfer-leader", "PUT", "/v1/operator/raft/transfer-leader", "", "operator:write", `operator { policy = "write" }`, `operator { policy = "read" }`},
	{"raft join", "POST", "/v1/operator/raft/join", joinBody, "management (or a verified server certificate)", "", `operator { policy = "write" }`},
	{"snapshot save", "GET", "/v1/operator/snapshot", "", "operator:write", `operator { policy = "write" }`, `operator { policy = "read" }`},
	{"snapshot restore", "PUT", "/v1/operator/snapshot", "a snapshot", "management", "", `operator { policy = "write" }`},
	{"modules read", "GET", "/v1/modules", "", "modules:read", `modules { policy = "read" }`, `operator { policy = "write" }`},
	{"modules reload", "PUT", "/v1/modules/reload", "", "modules:reload", `modules { policy = "reload" }`, `modules { policy = "read" }`},
	{"acl policy apply", "PUT", "/v1/acl/policy/p", `{"rules":"node { policy = \"write\" }"}`, "management", "", `operator { policy = "write" }`},
	{"acl token create", "PUT", "/v1/acl/token", `{"name":"x","type":"management"}`, "management", "", `operator { policy = "write" }`},
	{"acl token list", "GET", "/v1/acl/tokens", "", "management", "", `operator { policy = "write" }`},
}

// TestACLDeniesEveryEndpointClass: a missing, malformed, expired, revoked
// or insufficient token gets 403 "Permission denied" naming the missing
// capability, and nothing changes; a token with the capability passes.
func TestACLDeniesEveryEndpointClass(t *testing.T) {
	for _, tc := range aclCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newACLFixture(t)
			f.policy(t, "weaker", tc.weaker)
			f.policy(t, "unrelated", "namespace \"elsewhere\" {\n policy = \"write\"\n capabilities = [\"force-deregister\"]\n}")
			weak, _ := f.token(t, "", "weaker", "unrelated")
			expiring, _ := f.token(t, "1h", "weaker")
			revoked, revokedAcc := f.token(t, "", "weaker")
			var strong string
			if tc.grant != "" {
				f.policy(t, "grant", tc.grant)
				strong, _ = f.token(t, "", "grant")
				expiring, _ = f.token(t, "1h", "grant")
				revoked, revokedAcc = f.token(t, "", "grant")
			} else {
				strong = f.mgmt
			}
			if resp, out := do(t, http.MethodDelete, f.ts.URL+"/v1/acl/token/"+revokedAcc, "", api.TokenHeader, f.mgmt); resp.StatusCode != http.StatusOK {
				t.Fatalf("revoke: %d %s", resp.StatusCode, out)
			}
			f.clk.Advance(2 * time.Hour)

			denials := []struct {
				who, reason string
				hdr         []string
			}{
				{"missing", "", nil},
				{"malformed", "malformed token", []string{api.TokenHeader, "not-a-token"}},
				{"malformed bearer", "malformed token", []string{"Authorization", "Basic dXNlcjpwYXNz"}},
				{"unknown", "token not found", []string{api.TokenHeader, "8d3f5b4e-1f7c-4a53-9c0e-2a6b7f1d0e99"}},
				{"expired", "token expired", []string{api.TokenHeader, expiring}},
				{"revoked", "token not found", []string{"Authorization", "Bearer " + revoked}},
				{"insufficient", "", []string{api.TokenHeader, weak}},
			}
			for _, d := range denials {
				before := f.fingerprint(t)
				resp, out := do(t, tc.method, f.ts.URL+tc.path, tc.body, d.hdr...)
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s token: status %d, want 403: %s", d.who, resp.StatusCode, out)
					continue
				}
				var er api.ErrorResponse
				_ = json.Unmarshal([]byte(out), &er)
				if !strings.HasPrefix(er.Error, "Permission denied: missing capability "+tc.want) || !strings.Contains(er.Error, d.reason) {
					t.Errorf("%s token: error %q, want it to name %q and %q", d.who, er.Error, tc.want, d.reason)
				}
				if after := f.fingerprint(t); after != before {
					t.Errorf("%s token: a denied request changed something:\nbefore %s\nafter  %s", d.who, before, after)
				}
			}
			resp, out := do(t, tc.method, f.ts.URL+tc.path, tc.body, api.TokenHeader, strong)
			if resp.StatusCode == http.StatusForbidden {
				t.Errorf("token with the capability: denied: %s", out)
			}
		})
	}
}

// TestACLAnonymousPolicy: requests without a token get exactly what the
// anonymous policy grants.
func TestACLAnonymousPolicy(t *testing.T) {
	f := newACLFixture(t)
	if resp, _ := do(t, "GET", f.ts.URL+"/v1/volume/v1", ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no anonymous policy: status %d, want 403", resp.StatusCode)
	}
	f.policy(t, structs.AnonymousPolicy, `
namespace "default" { policy = "read" }
events { policy = "read" }
`)
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/v1/volume/v1", http.StatusOK},
		{"GET", "/v1/volumes?namespace=default", http.StatusOK},
		{"GET", "/v1/events", http.StatusOK},
		{"GET", "/v1/status/leader", http.StatusOK},
		{"GET", "/v1/volume/v1?namespace=prod", http.StatusForbidden},
		{"GET", "/v1/volumes", http.StatusForbidden},
		{"DELETE", "/v1/volume/v1", http.StatusForbidden},
		{"GET", "/v1/nodes", http.StatusForbidden},
		{"GET", "/v1/acl/tokens", http.StatusForbidden},
	} {
		resp, out := do(t, c.method, f.ts.URL+c.path, "")
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: status %d, want %d: %s", c.method, c.path, resp.StatusCode, c.want, out)
		}
	}
	resp, out := do(t, "GET", f.ts.URL+"/v1/acl/token/self", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(out, `"anonymous"`) {
		t.Errorf("token self without a token: %d %s", resp.StatusCode, out)
	}
}

// TestACLBootstrapOnce: a second bootstrap is refused (409) and creates
// no token.
func TestACLBootstrapOnce(t *testing.T) {
	f := newACLFixture(t)
	before := f.fingerprint(t)
	resp, out := do(t, http.MethodPost, f.ts.URL+"/v1/acl/bootstrap", "")
	if resp.StatusCode != http.StatusConflict || !strings.Contains(out, "already") {
		t.Fatalf("second bootstrap: %d %s, want 409", resp.StatusCode, out)
	}
	if f.fingerprint(t) != before {
		t.Error("a refused bootstrap changed the state")
	}
}

// TestACLSecretsNeverShown: token reads show accessors, never secrets or
// their hashes, and the state holds only the hash.
func TestACLSecretsNeverShown(t *testing.T) {
	f := newACLFixture(t)
	f.policy(t, "p", `node { policy = "read" }`)
	secret, acc := f.token(t, "", "p")
	var dump strings.Builder
	if err := f.b.Store.Persist(&dump); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{secret, f.mgmt} {
		if strings.Contains(dump.String(), s) {
			t.Errorf("the state snapshot holds a secret in clear text")
		}
	}
	if !strings.Contains(dump.String(), acl.HashSecret(secret)) {
		t.Error("the state snapshot lacks the secret's hash")
	}
	for _, path := range []string{"/v1/acl/tokens", "/v1/acl/token/" + acc} {
		resp, out := do(t, "GET", f.ts.URL+path, "", api.TokenHeader, f.mgmt)
		if resp.StatusCode != http.StatusOK || strings.Contains(out, secret) || strings.Contains(out, acl.HashSecret(secret)) || strings.Contains(out, "secret") {
			t.Errorf("GET %s: %d shows a secret or hash: %s", path, resp.StatusCode, out)
		}
	}
	resp, out := do(t, "GET", f.ts.URL+"/v1/acl/token/self", "", "Authorization", "Bearer "+secret)
	if resp.StatusCode != http.StatusOK || !strings.Contains(out, acc) {
		t.Errorf("token self with a bearer token: %d %s", resp.StatusCode, out)
	}
}

// TestACLAuditEvents: privileged actions record an audit event carrying
// the accessor of the token that asked, never its secret.
func TestACLAuditEvents(t *testing.T) {
	f := newACLFixture(t)
	f.policy(t, "ops", `
namespace "default" { capabilities = ["force-deregister", "detach"] }
operator { policy = "write" }
modules { policy = "reload" }
`)
	secret, acc := f.token(t, "", "ops")
	for _, r := range [][2]string{
		{"PUT", "/v1/volume/v1/detach?node=n1"},
		{"DELETE", "/v1/volume/v1?force=true"},
		{"PUT", "/v1/modules/reload"},
		{"DELETE", "/v1/operator/raft/peer?id=s2"},
	} {
		if resp, out := do(t, r[0], f.ts.URL+r[1], "", api.TokenHeader, secret); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", r[0], r[1], resp.StatusCode, out)
		}
	}
	if resp, out := do(t, "POST", f.ts.URL+"/v1/operator/raft/join", joinBody, api.TokenHeader, f.mgmt); resp.StatusCode != http.StatusOK {
		t.Fatalf("join with a management token: %d %s", resp.StatusCode, out)
	}
	evs, err := f.b.Store.Snapshot().Events(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range evs {
		if e.Type == structs.EventAudit {
			got[e.Fields["action"]] = e.Fields["accessor"]
			for _, v := range e.Fields {
				if v == secret || v == f.mgmt {
					t.Errorf("audit event %q holds a secret", e.Fields["action"])
				}
			}
		}
	}
	mgmtTok, err := f.svc.Resolve(f.mgmt)
	if err != nil {
		t.Fatal(err)
	}
	for action, want := range map[string]string{
		"detach": acc, "force-deregister": acc, "module-reload": acc, "raft-remove-peer": acc,
		"raft-join": mgmtTok.Accessor(), "acl-policy-upsert": mgmtTok.Accessor(), "acl-token-create": mgmtTok.Accessor(),
		"acl-bootstrap": mgmtTok.Accessor(),
	} {
		if got[action] != want {
			t.Errorf("audit %q: accessor %q, want %q (all: %v)", action, got[action], want, got)
		}
	}
}

// TestACLForwardedRequestKeepsToken: a follower forwards without judging
// (its copy of the tokens may lag: here it has none) and the leader
// decides with the token the request carried. A caller's own
// X-Volhost-Verified-Server header is no server identity.
func TestACLForwardedRequestKeepsToken(t *testing.T) {
	leader := newACLFixture(t)
	leader.policy(t, "gc", `operator { policy = "write" }`)
	secret, _ := leader.token(t, "", "gc")

	fb := apitest.NewStoreBackend()
	fs := api.NewServer(api.Config{}, fb.Store, fb, nil)
	fs.EnableCluster(&fakeOp{id: "s2", leaderAddr: strings.TrimPrefix(leader.ts.URL, "http://")})
	fs.EnableACL(api.ACLConfig{Service: acl.NewService(fb.Store, fb, nil), Audit: fb})
	follower := httptest.NewServer(fs.Handler())
	t.Cleanup(follower.Close)

	if resp, out := do(t, "PUT", follower.URL+"/v1/system/gc", "", "Authorization", "Bearer "+secret); resp.StatusCode != http.StatusOK {
		t.Fatalf("forwarded write with a token only the leader knows: %d %s", resp.StatusCode, out)
	}
	if resp, out := do(t, "PUT", follower.URL+"/v1/system/gc", ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("forwarded write without a token: %d %s, want the leader's 403", resp.StatusCode, out)
	}
	// A stale read the follower serves itself is checked there.
	if resp, out := do(t, "GET", follower.URL+"/v1/nodes?stale=true", "", api.TokenHeader, secret); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("stale read on the follower with a token it does not know: %d %s, want 403", resp.StatusCode, out)
	}
	before := leader.fingerprint(t)
	resp, out := do(t, "POST", follower.URL+"/v1/operator/raft/join", joinBody, api.VerifiedServerHeader, "true")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("join with a forged verified-server header: %d %s, want 403", resp.StatusCode, out)
	}
	if leader.fingerprint(t) != before {
		t.Fatal("a refused forwarded join changed something")
	}
}
