package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
)

// bodyRoutes are the routes that decode a request body, each with a body
// it accepts as a seed.
var bodyRoutes = []struct{ method, path, seed string }{
	{"PUT", "/v1/volumes", `{"volumes":[{"id":"vol-new","namespace":"default","external_id":"e","plugin_id":"ebs","access_mode":"single-node-writer","attachment_mode":"file-system"}]}`},
	{"PUT", "/v1/volume/vol-mw/claim", `{"alloc_id":"a1","node_id":"n1","mode":"write"}`},
	{"PUT", "/v1/volume/vol-mw/detach", `{"node_id":"n1"}`},
	{"PUT", "/v1/nodes", `{"node":{"id":"n9","status":"ready"}}`},
	{"PUT", "/v1/node/n1/status", `{"status":"down"}`},
	{"PUT", "/v1/node/n1/fence", `{"reason":"lost power"}`},
	{"PUT", "/v1/plugins", `{"plugin":{"id":"p9"}}`},
	{"PUT", "/v1/allocs", `{"allocs":[{"id":"a9","node_id":"n1","client_status":"running"}]}`},
	{"PUT", "/v1/system/gc", `{}`},
	{"DELETE", "/v1/volumes/leftovers", `{}`},
}

// FuzzRequestBodies: whatever the body of a route that decodes one, the
// API answers 2xx or a 4xx whose JSON error says what is wrong, never a
// 5xx (the fake backend accepts every call, so a 5xx is the API's own
// failure, a panic included).
func FuzzRequestBodies(f *testing.F) {
	for i, r := range bodyRoutes {
		f.Add(uint8(i), []byte(r.seed))
		f.Add(uint8(i), []byte(`{"x":1}`))
		f.Add(uint8(i), []byte(`null`))
	}
	seed := readSeed(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		st := seed.store()
		be := &fakeBackend{leader: "127.0.0.1:4747", isLeader: true}
		srv := api.New(api.Config{}, st, be, http.NotFoundHandler())
		r := bodyRoutes[int(route)%len(bodyRoutes)]
		req := httptest.NewRequest(r.method, r.path, strings.NewReader(string(body)))
		req.Host = "127.0.0.1:4646" // what the CLI sends (checkHost)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		res := rec.Result()
		out, _ := io.ReadAll(res.Body)
		switch {
		case res.StatusCode >= 500:
			t.Fatalf("%s %s %q: %d %s", r.method, r.path, body, res.StatusCode, out)
		case res.StatusCode >= 400:
			var e api.ErrorResponse
			if err := json.Unmarshal(out, &e); err != nil || e.Error == "" {
				t.Fatalf("%s %s %q: %d with no error message: %s", r.method, r.path, body, res.StatusCode, out)
			}
		}
	})
}
