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
			type answer struct {
				code int
				body string
			}
			got := make(chan answer, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodGet, f.ts.URL+tc.path+sep+"index="+index+"&wait=10m", nil)
				req.Header.Set(api.TokenHeader, secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					got <- answer{body: err.Error()}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- answer{resp.StatusCode, string(b)}
			}()
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
