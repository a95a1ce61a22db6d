package ui

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/volhost/volhost/host/structs"
)

func serve(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestEmbeddedAssets serves the real embedded UI: every page path gets
// the app shell, every asset its own type, unknown assets and directories 404.
func TestEmbeddedAssets(t *testing.T) {
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	index := h.files["index.html"]
	for _, tc := range []struct {
		path, wantType string
		wantStatus     int
		wantIndex      bool
	}{
		{"/ui/", "text/html; charset=utf-8", 200, true},
		{"/ui/index.html", "text/html; charset=utf-8", 200, true},
		{"/ui/app.js", "text/javascript; charset=utf-8", 200, false},
		{"/ui/api.js", "text/javascript; charset=utf-8", 200, false},
		{"/ui/charts.js", "text/javascript; charset=utf-8", 200, false},
		{"/ui/style.css", "text/css; charset=utf-8", 200, false},
		{"/ui/favicon.svg", "image/svg+xml", 200, false},
		// Pages of the single-page app: the shell.
		{"/ui/volumes", "text/html; charset=utf-8", 200, true},
		{"/ui/volume", "text/html; charset=utf-8", 200, true},
		{"/ui/events/", "text/html; charset=utf-8", 200, true},
		// Unknown assets are 404, never the shell (a missing script must fail loudly).
		{"/ui/nope.js", "", 404, false},
		{"/ui/app.js.map", "", 404, false},
		{"/ui/../ui.go", "", 404, false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			rec := serve(t, h, "GET", tc.path, nil)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d", rec.Code, tc.wantStatus)
			}
			if tc.wantStatus != 200 {
				if strings.Contains(rec.Body.String(), "<html") {
					t.Fatalf("a 404 answered with the app shell")
				}
				return
			}
			if got := rec.Header().Get("Content-Type"); got != tc.wantType {
				t.Fatalf("Content-Type %q, want %q", got, tc.wantType)
			}
			if got := rec.Header().Get("Cache-Control"); got != "no-cache" {
				t.Fatalf("Cache-Control %q, want no-cache", got)
			}
			if rec.Header().Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(rec.Header().Get("Content-Security-Policy"), "script-src 'self'") {
				t.Fatalf("security headers missing: %v", rec.Header())
			}
			if isIndex := rec.Body.String() == string(index.data); isIndex != tc.wantIndex {
				t.Fatalf("body is the app shell: %v, want %v", isIndex, tc.wantIndex)
			}
		})
	}
}

// TestETagRevalidation: the ETag is the content's hash; If-None-Match
// with it gives 304 without a body, a stale one the full asset.
func TestETagRevalidation(t *testing.T) {
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	first := serve(t, h, "GET", "/ui/app.js", nil)
	etag := first.Header().Get("ETag")
	if !strings.HasPrefix(etag, `"`) || len(etag) < 10 {
		t.Fatalf("ETag %q is not a strong validator", etag)
	}
	again := serve(t, h, "GET", "/ui/app.js", map[string]string{"If-None-Match": etag})
	if again.Code != http.StatusNotModified || again.Body.Len() != 0 {
		t.Fatalf("revalidation: status %d with %d bytes, want 304 without a body", again.Code, again.Body.Len())
	}
	stale := serve(t, h, "GET", "/ui/app.js", map[string]string{"If-None-Match": `"stale"`})
	if stale.Code != 200 || stale.Body.Len() != first.Body.Len() {
		t.Fatalf("stale ETag: status %d, %d bytes; want 200 with the asset", stale.Code, stale.Body.Len())
	}
	if other := serve(t, h, "GET", "/ui/style.css", nil).Header().Get("ETag"); other == etag {
		t.Fatalf("two assets share ETag %s", etag)
	}
	head := serve(t, h, "HEAD", "/ui/app.js", nil)
	if head.Code != 200 || head.Body.Len() != 0 || head.Header().Get("Content-Type") == "" {
		t.Fatalf("HEAD: status %d, %d bytes", head.Code, head.Body.Len())
	}
	if post := serve(t, h, "POST", "/ui/app.js", nil); post.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: status %d, want 405", post.Code)
	}
}

// TestNoDirectoryListing: a directory of assets is 404, not a listing,
// and nothing below it falls back to the shell.
func TestNoDirectoryListing(t *testing.T) {
	fsys := fstest.MapFS{
		"assets/index.html":      {Data: []byte("<html>shell</html>")},
		"assets/img/logo.svg":    {Data: []byte("<svg/>")},
		"assets/vendor/x/lib.js": {Data: []byte("export {}")},
	}
	h, err := newHandler(fsys, "assets")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/ui/img", "/ui/img/", "/ui/vendor/x", "/ui/vendor/x/", "/ui/img/missing", "/ui/img/missing.svg"} {
		if rec := serve(t, h, "GET", p, nil); rec.Code != http.StatusNotFound || strings.Contains(rec.Body.String(), "logo.svg") {
			t.Errorf("%s: status %d body %q, want 404 without a listing", p, rec.Code, rec.Body.String())
		}
	}
	if rec := serve(t, h, "GET", "/ui/img/logo.svg", nil); rec.Code != 200 || rec.Header().Get("Content-Type") != "image/svg+xml" {
		t.Fatalf("asset in a directory: status %d type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

// TestRefusesUnknownTypesAndMissingShell: an asset the handler has no
// content type for, or a tree without index.html, is a build error, not
// a sniffed guess at run time.
func TestRefusesUnknownTypesAndMissingShell(t *testing.T) {
	if _, err := newHandler(fstest.MapFS{"assets/index.html": {}, "assets/notes.txt": {}}, "assets"); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("unknown type: err = %v, want one naming notes.txt", err)
	}
	if _, err := newHandler(fstest.MapFS{"assets/app.js": {}}, "assets"); err == nil || !strings.Contains(err.Error(), "index.html") {
		t.Fatalf("no shell: err = %v, want one naming index.html", err)
	}
}

// TestEventTypeFilterListsEveryType: the events page's type filter offers
// every type the API accepts (structs.EventTypes) and no other, so no
// event type is unfilterable in the UI and no choice answers a 400.
func TestEventTypeFilterListsEveryType(t *testing.T) {
	src, err := os.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^const EVENT_TYPES = (\[.*\]);$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("assets/app.js declares no EVENT_TYPES array on one line")
	}
	var got []string
	if err := json.Unmarshal(m[1], &got); err != nil {
		t.Fatalf("EVENT_TYPES is not a JSON array of strings: %v", err)
	}
	if !slices.Equal(got, structs.EventTypes) {
		t.Fatalf("EVENT_TYPES = %v, want structs.EventTypes %v", got, structs.EventTypes)
	}
}
