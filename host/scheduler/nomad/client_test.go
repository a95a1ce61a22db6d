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
