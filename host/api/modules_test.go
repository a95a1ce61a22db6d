package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
)

// TestModuleInfoPerPage: GET /v1/module/{name} lists at most ?per_page=
// served volumes (default and cap MaxPerPage) and refuses a next_token,
// which this route does not hand out.
func TestModuleInfoPerPage(t *testing.T) {
	mods := &fakeModules{}
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{MaxPerPage: 50}, b.Store, b, nil)
	s.EnableModules(mods)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	for _, tc := range []struct {
		query     string
		status    int
		wantLimit int
	}{
		{"", http.StatusOK, 50},
		{"?per_page=7", http.StatusOK, 7},
		{"?per_page=5000", http.StatusOK, 50},
		{"?per_page=0", http.StatusBadRequest, 0},
		{"?per_page=x", http.StatusBadRequest, 0},
		{"?next_token=YQ", http.StatusBadRequest, 0},
	} {
		mods.limit = 0
		resp, body := do(t, http.MethodGet, ts.URL+"/v1/module/m1"+tc.query, "")
		if resp.StatusCode != tc.status {
			t.Errorf("%q: status %d, want %d: %s", tc.query, resp.StatusCode, tc.status, body)
		}
		if mods.limit != tc.wantLimit {
			t.Errorf("%q: the backend was asked for %d volumes, want %d", tc.query, mods.limit, tc.wantLimit)
		}
	}
}

// A reload that takes longer than WriteTimeout (a cold compile of a large
// module on a loaded machine) still gets its answer: the caller saw EOF
// before modules routes had their own deadline, though the reload had
// taken effect.
func TestSlowReloadGetsItsAnswer(t *testing.T) {
	mods := &fakeModules{reloadTakes: 300 * time.Millisecond}
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{WriteTimeout: 50 * time.Millisecond}, b.Store, b, nil)
	s.EnableModules(mods)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for _, method := range []string{http.MethodPut, http.MethodPost} {
		resp, body := do(t, method, ts.URL+"/v1/modules/reload", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s reload: status %d: %s", method, resp.StatusCode, body)
		}
	}
}
