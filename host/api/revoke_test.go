package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api"
)

// A blocking query already waiting when its token is revoked (deleted,
// expired, or its policy narrowed) ends with 403 at once, instead of
// answering minutes later what the token may no longer read; the events
// stream (GET /v1/events?index=) is one such query.
func TestBlockingQueryEndsWhenItsTokenIsRevoked(t *testing.T) {
	for _, tc := range []struct {
		name, path, rules string
		revoke            func(t *testing.T, f *aclFixture, accessor string)
		want              string
	}{
		{"token deleted", "/v1/volumes?namespace=default", `namespace "default" { policy = "read" }`,
			func(t *testing.T, f *aclFixture, accessor string) {
				if resp, body := do(t, http.MethodDelete, f.ts.URL+"/v1/acl/token/"+accessor, "", api.TokenHeader, f.mgmt); resp.StatusCode != http.StatusOK {
					t.Fatalf("delete token: %d %s", resp.StatusCode, body)
				}
			}, "token not found"},
		{"token expired", "/v1/volume/v1", `namespace "default" { policy = "read" }`,
			func(_ *testing.T, f *aclFixture, _ string) { f.clk.Advance(time.Hour) }, "token expired"},
		{"policy narrowed", "/v1/events?type=claim-transition", `events { policy = "read" }`,
			func(t *testing.T, f *aclFixture, _ string) { f.policy(t, "p", `node { policy = "read" }`) }, "missing capability events:read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newACLFixture(t)
			f.policy(t, "p", tc.rules)
			secret, accessor := f.token(t, "1h", "p")
			resp, body := do(t, http.MethodGet, f.ts.URL+tc.path, "", api.TokenHeader, secret)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("before revocation: %d %s", resp.StatusCode, body)
			}
			index := resp.Header.Get(api.IndexHeader)
			sep := "?"
			if strings.Contains(tc.path, "?") {
				sep = "&"
			}
			got := getInBackground(f.ts.URL+tc.path+sep+"index="+index+"&wait=10m", secret)
			// The query passed the check and its revocation watch is armed:
			// the token's expiry timer is the fake clock's only waiter.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := f.clk.BlockUntilContext(ctx, 1); err != nil {
				t.Fatal(err)
			}
			select {
			case a := <-got:
				t.Fatalf("the query answered before any change: %d %s", a.code, a.body)
			default:
			}
			tc.revoke(t, f, accessor)
			a := <-got // nothing else would end it for 10 minutes
			if a.code != http.StatusForbidden || !strings.Contains(a.body, tc.want) {
				t.Fatalf("blocking query after revocation: %d %s, want 403 naming %q", a.code, a.body, tc.want)
			}
		})
	}
}

// Authorization is not cached per connection: the next request on the
// same kept-alive connection after a revocation is refused.
func TestKeptAliveConnectionLosesARevokedToken(t *testing.T) {
	f := newACLFixture(t)
	f.policy(t, "p", `namespace "default" { policy = "read" }`)
	secret, accessor := f.token(t, "", "p")
	cl := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
	defer cl.CloseIdleConnections()
	get := func() (code int, reused bool) {
		req, _ := http.NewRequest(http.MethodGet, f.ts.URL+"/v1/volume/v1", nil)
		req.Header.Set(api.TokenHeader, secret)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, reused
	}
	if code, _ := get(); code != http.StatusOK {
		t.Fatalf("before revocation: %d", code)
	}
	if resp, body := do(t, http.MethodDelete, f.ts.URL+"/v1/acl/token/"+accessor, "", api.TokenHeader, f.mgmt); resp.StatusCode != http.StatusOK {
		t.Fatalf("delete token: %d %s", resp.StatusCode, body)
	}
	if code, reused := get(); code != http.StatusForbidden || !reused {
		t.Fatalf("after revocation on the kept-alive connection: %d (reused %v), want 403 on the same connection", code, reused)
	}
}

// A node agent's token (node_id "n1" write) is bounded on the HTTP API:
// besides its own node's registration it may do nothing an operator, a
// reader or another node's agent does. Each attempt is 403 and the
// state, the peers and the modules are unchanged. Its own node's status
// is one of them: "down" set through the API is an operator's word
// (HeartbeatLost cleared), on which the default policy releases the
// node's claims skipping NodeUnpublish and NodeUnstage, as a fence does;
// the agent reports liveness through its stream's heartbeats.
func TestNodeAgentTokenBoundedOnTheAPI(t *testing.T) {
	f := newACLFixture(t)
	f.policy(t, "agent-n1", `node_id "n1" { policy = "write" }`)
	secret, _ := f.token(t, "", "agent-n1")
	for _, tc := range []struct{ name, method, path, body string }{
		{"fence its own node", "PUT", "/v1/node/n1/fence", `{"reason":"off"}`},
		{"unfence its own node", "DELETE", "/v1/node/n1/fence", ""},
		{"another node's status", "PUT", "/v1/node/n2/status", `{"status":"down"}`},
		{"mark its own node down", "PUT", "/v1/node/n1/status", `{"status":"down"}`},
		{"mark its own node ready", "PUT", "/v1/node/n1/status", `{"status":"ready"}`},
		{"register another node", "PUT", "/v1/nodes", `{"node":{"id":"n2"}}`},
		{"list every node", "GET", "/v1/nodes", ""},
		{"register a plugin", "PUT", "/v1/plugins", `{"plugin":{"id":"p2"}}`},
		{"write allocations", "PUT", "/v1/allocs", `{"allocs":[{"id":"a1","node_id":"n1","client_status":"running"}]}`},
		{"read a volume", "GET", "/v1/volume/v1", ""},
		{"claim a volume on its node", "PUT", "/v1/volume/v1/claim", `{"alloc_id":"a1","node_id":"n1","mode":"write"}`},
		{"detach a volume", "PUT", "/v1/volume/v1/detach?node=n1", ""},
		{"read events", "GET", "/v1/events", ""},
		{"save a snapshot (sealed secrets)", "GET", "/v1/operator/snapshot", ""},
		{"list tokens", "GET", "/v1/acl/tokens", ""},
		{"mint a token", "PUT", "/v1/acl/token", `{"name":"x","type":"management"}`},
		{"join a voter", "POST", "/v1/operator/raft/join", joinBody},
		{"reload modules", "PUT", "/v1/modules/reload", ""},
		{"system gc", "PUT", "/v1/system/gc", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.fingerprint(t)
			resp, body := do(t, tc.method, f.ts.URL+tc.path, tc.body, api.TokenHeader, secret)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "Permission denied") {
				t.Fatalf("%s %s: %d %s, want 403", tc.method, tc.path, resp.StatusCode, body)
			}
			if after := f.fingerprint(t); after != before {
				t.Fatalf("state changed by a refused request:\n%s\n%s", before, after)
			}
		})
	}
}
