package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/client"
)

// TestTokenNeverFollowsARedirectToAnotherHost: the CLI's client sends its
// token as X-Volhost-Token, a header Go's HTTP client copies onto every
// redirect, to any host and from https to plain http (it strips only
// Authorization and Cookie). Whatever answers at the address (a proxy or
// load balancer in front of the agents, a misconfigured ingress) could
// send the token elsewhere with one 307. A redirect to another host is
// not followed now: the request fails, and the other host sees nothing.
func TestTokenNeverFollowsARedirectToAnotherHost(t *testing.T) {
	var mu sync.Mutex
	var leaked []string
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.Header.Get(api.TokenHeader))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"address":"x","is_leader":true}`))
	}))
	defer evil.Close()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evil.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer front.Close()
	for name, hc := range map[string]*http.Client{"default client": nil, "the CLI's TLS client": {Transport: &http.Transport{}}} {
		c, err := client.New(front.URL, hc)
		if err != nil {
			t.Fatal(err)
		}
		c.SetToken("8b1c2d3e-0000-4000-8000-000000000001")
		if _, err := c.Leader(context.Background()); err == nil {
			t.Errorf("%s: a redirect to another host was followed", name)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(leaked) > 0 {
		t.Fatalf("another host received requests carrying the tokens %q", leaked)
	}
}
