package api_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A client that goes away during a long poll (every page change of the
// web UI) is not a failed request: no 500 and no warning, a debug line
// with 499. A query cut short by the server's own shutdown is still the
// server's failure.
func TestClientGoneIsNotAFailure(t *testing.T) {
	var logs syncBuffer
	b := apitest.NewStoreBackend()
	srv := api.NewServer(api.Config{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})}, b.Store, b, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client has gone before the store answers
	req := httptest.NewRequest(http.MethodGet, "/v1/volumes?index=999&wait=5m", nil).WithContext(ctx)
	req.Host = "127.0.0.1"
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != api.StatusClientClosedRequest {
		t.Errorf("status %d, want %d: %s", rec.Code, api.StatusClientClosedRequest, rec.Body)
	}
	out := logs.String()
	if strings.Contains(out, "[WARN]") || strings.Contains(out, "request failed") {
		t.Errorf("a client that went away is logged as a failure:\n%s", out)
	}
	if !strings.Contains(out, "[DEBUG] api: client went away before the answer") || !strings.Contains(out, "status=499") {
		t.Errorf("no debug line for the client that went away:\n%s", out)
	}

	// The server shutting down cancels the same context: not the client's doing.
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code < 500 || rec.Code == api.StatusClientClosedRequest {
		t.Errorf("during shutdown: status %d, want a 5xx", rec.Code)
	}
}
