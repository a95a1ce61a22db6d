package nomad

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestClientRefusedToken: a Nomad that refuses the configured token is one
// clear line naming the token (ErrAuth), not the api client's raw error,
// for the list and for the stream alike.
func TestClientRefusedToken(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Nomad-Token"))
		mu.Unlock()
		http.Error(w, "ACL token not found", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	set, err := Config{Address: srv.URL, Token: "wrong-token"}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(set)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, err = c.Nodes(ctx)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "Nomad refused the token (HTTP 403 ACL token not found") {
		t.Fatalf("nodes with a refused token: %v", err)
	}
	ch, err := c.Stream(ctx, 1)
	if err == nil {
		// Opened, then refused: the refusal is the stream's last batch.
		err = (<-ch).Err
	}
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("stream with a refused token: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || got[0] != "wrong-token" {
		t.Fatalf("token sent %q, want the configured one", got)
	}
}

// TestInsecureNamesATokenInClear: a token, or an address's password,
// sent over plain HTTP to another machine is named INSECURE (the agent
// logs it at start); loopback, https or no credential is not.
func TestInsecureNamesATokenInClear(t *testing.T) {
	for _, tc := range []struct {
		cfg      Config
		insecure bool
	}{
		{Config{Address: "http://nomad.example:4646", Token: "t"}, true},
		{Config{Address: "http://ops:pw@10.0.0.5:4646"}, true},
		{Config{Address: "http://10.0.0.5:4646"}, false},
		{Config{Address: "https://nomad.example:4646", Token: "t"}, false},
		{Config{Address: "http://127.0.0.1:4646", Token: "t"}, false},
		{Config{Address: "http://localhost:4646", Token: "t"}, false},
		{Config{Address: "http://[::1]:4646", Token: "t"}, false},
	} {
		msg := tc.cfg.Insecure()
		if (msg != "") != tc.insecure || strings.Contains(msg, "pw") {
			t.Errorf("%+v: %q, want insecure %v (and no password)", tc.cfg, msg, tc.insecure)
		}
	}
}
