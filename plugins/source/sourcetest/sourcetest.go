// Package sourcetest serves an in-process OCI registry for tests of module
// bundles (go-containerregistry's pkg/registry, no network), with a switch
// that makes it serve tampered blobs.
package sourcetest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Tamperer flips a byte of every blob it serves while On (a registry, or a
// proxy in front of one, serving a layer other than the one signed).
type Tamperer struct {
	next http.Handler
	On   atomic.Bool
}

func (t *Tamperer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !t.On.Load() || r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
		t.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	t.next.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	if len(body) > 0 {
		body[len(body)/2] ^= 0xff
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body)
}

// NewRegistry serves an empty registry until the test ends and returns its
// host:port and the switch that tampers with its blobs.
func NewRegistry(tb testing.TB) (host string, tamper *Tamperer) {
	tb.Helper()
	tamper = &Tamperer{next: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	srv := httptest.NewServer(tamper)
	tb.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), tamper
}
