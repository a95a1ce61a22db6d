package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

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
