package api_test

import (
	"context"
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

// queryRoutes are GET routes with query parameters, each with a query it
// accepts as a seed.
var queryRoutes = []struct{ path, seed string }{
	{"/v1/volumes", "namespace=default&claim_state=taken&stuck=true&search=vol&per_page=2"},
	{"/v1/events", "volume_id=vol1&namespace=default&type=claim-transition&after=2026-01-01T00:00:00Z"},
	{"/v1/allocs", "node_id=n1&per_page=1"},
	{"/v1/nodes", "per_page=1&stale=true"},
	{"/v1/plugins", "index=1&wait=0s"},
	{"/v1/volumes/leftovers", "per_page=1"},
	{"/v1/volume/vol1", "namespace=default"},
}

// FuzzQueryParameters: whatever the query of a read, the API answers 200
// or a 4xx whose JSON error names what is wrong, never a 5xx; and a 400
// for an unknown parameter names that parameter.
func FuzzQueryParameters(f *testing.F) {
	for i, r := range queryRoutes {
		f.Add(uint8(i), r.seed)
		f.Add(uint8(i), "since=abc")
		f.Add(uint8(i), "next_token=eHl6&type=zzz&type=audit")
	}
	seed := readSeed(f)
	f.Fuzz(func(t *testing.T, route uint8, query string) {
		st := seed.store()
		srv := api.New(api.Config{}, st, &fakeBackend{leader: "127.0.0.1:4747", isLeader: true}, http.NotFoundHandler())
		r := queryRoutes[int(route)%len(queryRoutes)]
		req := httptest.NewRequest("GET", r.path, nil)
		req.URL.RawQuery = query
		req.Host = "127.0.0.1:4646"
		// A query with ?index= may park (the seed's index is low): once
		// the store says it is waiting, the parameters were accepted, and
		// the request is cancelled rather than waited out.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req = req.WithContext(ctx)
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.Handler().ServeHTTP(rec, req)
		}()
		select {
		case <-done:
		case <-st.waiting:
			cancel()
			<-done
			return
		}
		res := rec.Result()
		out, _ := io.ReadAll(res.Body)
		if res.StatusCode == 200 {
			return
		}
		var e api.ErrorResponse
		// 404: a namespace the seed lacks.
		if res.StatusCode/100 != 4 || json.Unmarshal(out, &e) != nil || e.Error == "" {
			t.Fatalf("GET %s?%s: %d %s", r.path, query, res.StatusCode, out)
		}
		if !strings.Contains(e.Error, "unknown query parameter") {
			return
		}
		if !req.URL.Query().Has(e.Field) {
			t.Fatalf("GET %s?%s: refused %q, which the query does not hold: %s", r.path, query, e.Field, e.Error)
		}
	})
}
