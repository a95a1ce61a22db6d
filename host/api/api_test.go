package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

type fixture struct {
	srv     *api.Server
	store   *fakeStore
	backend *fakeBackend
	ts      *httptest.Server
}

// stateSeed is testdata/state.json: what newFixture and FuzzRequestBodies
// serve.
type stateSeed struct {
	Volumes   []*structs.Volume   `json:"volumes"`
	Allocs    []*structs.Alloc    `json:"allocs"`
	Nodes     []*structs.Node     `json:"nodes"`
	Plugins   []*structs.Plugin   `json:"plugins"`
	Events    []*structs.Event    `json:"events"`
	Leftovers []*structs.Leftover `json:"leftovers"`
	Index     map[string]uint64   `json:"index"`
}

func readSeed(tb testing.TB) stateSeed {
	tb.Helper()
	raw, err := os.ReadFile("testdata/state.json")
	if err != nil {
		tb.Fatal(err)
	}
	var seed stateSeed
	if err := json.Unmarshal(raw, &seed); err != nil {
		tb.Fatal(err)
	}
	return seed
}

// store is a fake store holding the seed.
func (seed stateSeed) store() *fakeStore {
	st := newFakeStore()
	st.volumes, st.allocs, st.nodes, st.plugins = seed.Volumes, seed.Allocs, seed.Nodes, seed.Plugins
	st.events, st.leftovers, st.index = seed.Events, seed.Leftovers, seed.Index
	return st
}

// newFixture serves the API over a fake store seeded from testdata/state.json.
func newFixture(t *testing.T, cfg api.Config) *fixture {
	t.Helper()
	st := readSeed(t).store()
	be := &fakeBackend{leader: "127.0.0.1:4747", isLeader: true}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "volhost_volumes 2\n")
	})
	srv := api.New(cfg, st, be, metrics)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &fixture{srv: srv, store: st, backend: be, ts: ts}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (r response) errorBody(t *testing.T) api.ErrorResponse {
	t.Helper()
	var e api.ErrorResponse
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %q", err, r.body)
	}
	return e
}

func (f *fixture) do(t *testing.T, method, path, body string) response {
	t.Helper()
	return doCtx(t, context.Background(), f.ts.URL, method, path, body)
}

func doCtx(t *testing.T, ctx context.Context, base, method, path, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	setTestContentType(req, body != "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func TestReadRoutes(t *testing.T) {
	f := newFixture(t, api.Config{})
	tests := []struct {
		path      string
		wantIndex string
		contains  []string
		excludes  []string
	}{
		{"/v1/volumes", "5", []string{`"id": "vol1"`, `"id": "vol2"`}, nil},
		{"/v1/volumes?namespace=prod", "5", []string{`"id": "vol2"`}, []string{`"id": "vol1"`}},
		{"/v1/volumes?plugin_id=gce-pd", "5", []string{`"id": "vol1"`}, []string{`"id": "vol2"`}},
		{"/v1/volume/vol1", "6", []string{`"id": "vol1"`, `"state": "node-detached"`, `"code_name": "Unavailable"`, `"allowed": true`}, nil},
		{"/v1/volume/vol2?namespace=prod", "6", []string{`"id": "vol2"`, `"allowed": false`, `"live_allocs": [`}, nil},
		{"/v1/volumes/leftovers", "3", []string{`"id": "default/old/a9"`}, nil},
		{"/v1/nodes", "2", []string{`"id": "n1"`, `"id": "n2"`}, nil},
		{"/v1/node/n1", "2", []string{`"external_node_id": "projects/p/zones/z/instances/n1"`}, nil},
		{"/v1/plugins", "1", []string{`"id": "gce-pd"`}, nil},
		{"/v1/plugin/gce-pd", "1", []string{`"publish_unpublish": true`}, nil},
		{"/v1/allocs", "6", []string{`"id": "a1"`, `"id": "a3"`}, nil},
		{"/v1/allocs?node_id=n2", "6", []string{`"id": "a3"`}, []string{`"id": "a1"`}},
		{"/v1/alloc/a2", "6", []string{`"client_status": "running"`}, nil},
		{"/v1/events", "5", []string{`"message": "taken"`, `"message": "driver down"`}, nil},
		{"/v1/status/leader", "", []string{`"address": "127.0.0.1:4747"`, `"is_leader": true`}, nil},
		{"/v1/metrics", "", []string{"volhost_volumes 2"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			r := f.do(t, http.MethodGet, tt.path, "")
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if got := r.header.Get(api.IndexHeader); got != tt.wantIndex {
				t.Errorf("index header = %q, want %q", got, tt.wantIndex)
			}
			for _, c := range tt.contains {
				if !strings.Contains(r.body, c) {
					t.Errorf("body lacks %s:\n%s", c, r.body)
				}
			}
			for _, c := range tt.excludes {
				if strings.Contains(r.body, c) {
					t.Errorf("body has %s:\n%s", c, r.body)
				}
			}
		})
	}
}

func TestSecretsRedacted(t *testing.T) {
	f := newFixture(t, api.Config{})
	for _, p := range []string{"/v1/volumes", "/v1/volume/vol1"} {
		r := f.do(t, http.MethodGet, p, "")
		if strings.Contains(r.body, "hunter2") || !strings.Contains(r.body, api.Redacted) {
			t.Errorf("%s: secret not redacted:\n%s", p, r.body)
		}
	}
	// The store's object is untouched by redaction.
	if got := f.store.volumes[0].Secrets["token"]; got != "hunter2" {
		t.Errorf("redaction mutated the stored volume: %q", got)
	}
}

func TestWriteRoutes(t *testing.T) {
	tests := []struct {
		name, method, path, body string
		wantCall                 string
		wantArgs                 string // fmt %v of the recorded args, when set
		contains                 string
	}{
		{"register volumes", "PUT", "/v1/volumes", `{"volumes":[{"id":"v9","plugin_id":"gce-pd","external_id":"d9"}]}`, "RegisterVolumes", "", `"index": 10`},
		{"register volumes post", "POST", "/v1/volumes", `{"volumes":[{"namespace":"prod","id":"v9"}]}`, "RegisterVolumes", "", `"index": 10`},
		{"deregister", "DELETE", "/v1/volume/vol1", "", "DeregisterVolume", "[default vol1 false]", `"leftovers": []`},
		{"deregister force ns", "DELETE", "/v1/volume/vol2?namespace=prod&force=true", "", "DeregisterVolume", "[prod vol2 true]", `"index": 11`},
		{"claim", "PUT", "/v1/volume/vol1/claim", `{"alloc_id":"a5","node_id":"n1","mode":"write"}`, "ClaimVolume", "", `"state": "taken"`},
		{"detach", "PUT", "/v1/volume/vol1/detach?node=n1", "", "DetachVolume", "[default vol1 n1]", `"released": [`},
		{"clear leftovers body", "DELETE", "/v1/volumes/leftovers", `{"ids":["default/old/a9"]}`, "ClearLeftovers", "[[default/old/a9] false]", `"index": 13`},
		{"clear leftovers all", "DELETE", "/v1/volumes/leftovers?all=true", "", "ClearLeftovers", "[[] true]", `"index": 13`},
		{"clear leftovers query ids", "DELETE", "/v1/volumes/leftovers?id=x&id=y", "", "ClearLeftovers", "[[x y] false]", `"index": 13`},
		{"register node", "PUT", "/v1/nodes", `{"node":{"id":"n3","status":"ready","plugins":{"gce-pd":{"plugin_id":"gce-pd","endpoint":"unix:///x.sock"}}}}`, "RegisterNode", "", `"id": "n3"`},
		{"node status", "PUT", "/v1/node/n1/status", `{"status":"down"}`, "UpdateNodeStatus", "[n1 down]", `"index": 9`},
		{"node fence", "PUT", "/v1/node/n1/fence", `{"reason":"powered off in console"}`, "FenceNode", "[n1 powered off in console anonymous]", `"index": 12`},
		{"node unfence", "DELETE", "/v1/node/n1/fence", "", "UnfenceNode", "[n1 anonymous]", `"index": 13`},
		{"register plugin", "PUT", "/v1/plugins", `{"plugin":{"id":"p2","controller_endpoint":"tcp://127.0.0.1:1"}}`, "RegisterPlugin", "", `"publish_unpublish": true`},
		{"upsert allocs", "PUT", "/v1/allocs", `{"allocs":[{"id":"a1","node_id":"n1","client_status":"complete"}]}`, "UpsertAllocs", "", `"index": 12`},
		{"system gc", "PUT", "/v1/system/gc", "", "SystemGC", "[]", `"volumes": 3`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, api.Config{})
			r := f.do(t, tt.method, tt.path, tt.body)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			c := f.backend.lastCall()
			if c.method != tt.wantCall {
				t.Fatalf("backend call = %q, want %q", c.method, tt.wantCall)
			}
			if tt.wantArgs != "" {
				if got := fmt.Sprint(c.args); got != tt.wantArgs {
					t.Errorf("args = %s, want %s", got, tt.wantArgs)
				}
			}
			if !strings.Contains(r.body, tt.contains) {
				t.Errorf("body lacks %s:\n%s", tt.contains, r.body)
			}
		})
	}
}

func TestWriteArgumentsFilled(t *testing.T) {
	f := newFixture(t, api.Config{})
	// The namespace defaults on registration, and a claim takes the volume
	// from the path.
	f.do(t, "PUT", "/v1/volumes", `{"volumes":[{"id":"v9"}]}`)
	vols := f.backend.lastCall().args[0].([]*structs.Volume)
	if vols[0].Namespace != api.DefaultNamespace {
		t.Errorf("namespace = %q, want default", vols[0].Namespace)
	}
	f.do(t, "PUT", "/v1/volume/vol2/claim?namespace=prod", `{"alloc_id":"a5","node_id":"n1","mode":"read"}`)
	req := f.backend.lastCall().args[0].(*structs.ClaimRequest)
	if req.Namespace != "prod" || req.VolumeID != "vol2" || req.Mode != structs.ClaimRead {
		t.Errorf("claim request = %+v", req)
	}
}

func TestBadRequests(t *testing.T) {
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantField                string
		wantMsg                  string
	}{
		{"unknown field", "PUT", "/v1/volumes", `{"volumes":[{"id":"v","colour":"red"}]}`, 400, "colour", "unknown field"},
		{"unknown top field", "PUT", "/v1/plugins", `{"plugin":{"id":"p"},"extra":1}`, 400, "extra", "unknown field"},
		{"syntax", "PUT", "/v1/volumes", `{"volumes":[`, 400, "", "truncated"},
		{"bad syntax", "PUT", "/v1/volumes", `{"volumes" 1}`, 400, "", "invalid JSON at byte"},
		{"wrong type", "PUT", "/v1/allocs", `{"allocs":[{"id":7}]}`, 400, "allocs.id", "expected string"},
		{"empty body", "PUT", "/v1/volumes", ``, 400, "", "request body is empty"},
		{"two values", "PUT", "/v1/node/n1/status", `{"status":"down"} {}`, 400, "", "more than one JSON value"},
		{"no volumes", "PUT", "/v1/volumes", `{"volumes":[]}`, 400, "volumes", "no volumes given"},
		{"null volume", "PUT", "/v1/volumes", `{"volumes":[null]}`, 400, "volumes", "entry 0 is null"},
		{"no node", "PUT", "/v1/nodes", `{}`, 400, "node", "missing"},
		{"empty node id", "PUT", "/v1/nodes", `{"node":{"id":""}}`, 400, "node.id", "must not be empty"},
		{"bad plugin id", "PUT", "/v1/plugins", `{"plugin":{"id":"a b"}}`, 400, "plugin.id", "is not allowed: an ID holds only ASCII"},
		{"bad alloc id", "PUT", "/v1/allocs", `{"allocs":[{"id":"x\ty"}]}`, 400, "allocs.id", "is not allowed: an ID holds only ASCII"},
		{"bad path id", "GET", "/v1/volume/a%20b", "", 400, "volume_id", "is not allowed: an ID holds only ASCII"},
		{"look-alike path id (Hangul filler)", "GET", "/v1/volume/vol1%E3%85%A4", "", 400, "volume_id", "U+3164 at byte 4 is not allowed"},
		{"look-alike namespace (variation selector)", "GET", "/v1/volume/vol1?namespace=default%EF%B8%8F", "", 400, "namespace", "U+FE0F"},
		{"empty volume id", "GET", "/v1/volume/", "", 400, "volume_id", "must not be empty"},
		{"empty node id", "PUT", "/v1/node/", "", 400, "node_id", "must not be empty"},
		{"empty alloc id", "GET", "/v1/alloc/", "", 400, "alloc_id", "must not be empty"},
		{"long id", "GET", "/v1/node/" + strings.Repeat("x", 129), "", 400, "node_id", "at most 128 allowed"},
		{"bad namespace", "GET", "/v1/volume/vol1?namespace=a%09b", "", 400, "namespace", "is not allowed: an ID holds only ASCII"},
		{"bad index", "GET", "/v1/volumes?index=abc", "", 400, "index", "not an unsigned integer"},
		{"bad wait", "GET", "/v1/volumes?index=1&wait=5", "", 400, "wait", "not a duration"},
		{"negative wait", "GET", "/v1/volumes?index=1&wait=-1s", "", 400, "wait", "negative"},
		{"bad force", "DELETE", "/v1/volume/vol1?force=maybe", "", 400, "force", "not a boolean"},
		{"detach no node", "PUT", "/v1/volume/vol1/detach", "", 400, "node", "must not be empty"},
		{"claim bad mode", "PUT", "/v1/volume/vol1/claim", `{"alloc_id":"a","node_id":"n","mode":"rw"}`, 400, "mode", `got "rw"`},
		{"claim no alloc", "PUT", "/v1/volume/vol1/claim", `{"node_id":"n","mode":"read"}`, 400, "alloc_id", "must not be empty"},
		{"claim other volume", "PUT", "/v1/volume/vol1/claim", `{"volume_id":"vol2","alloc_id":"a","node_id":"n","mode":"read"}`, 400, "volume_id", `names volume "vol2"`},
		{"node status bad", "PUT", "/v1/node/n1/status", `{"status":"sleepy"}`, 400, "status", `got "sleepy"`},
		{"leftovers neither", "DELETE", "/v1/volumes/leftovers", "", 400, "ids", "give leftover IDs"},
		{"leftovers both", "DELETE", "/v1/volumes/leftovers", `{"ids":["x"],"all":true}`, 400, "ids", "not both"},
		{"missing volume", "GET", "/v1/volume/nope", "", 404, "", `volume "default/nope" does not exist`},
		{"escaped slash id is addressable", "GET", "/v1/volume/a%2Fb", "", 404, "", `volume "default/a/b" does not exist`},
		{"missing node", "GET", "/v1/node/nope", "", 404, "", `node "nope" does not exist`},
		{"missing plugin", "GET", "/v1/plugin/nope", "", 404, "", `plugin "nope" does not exist`},
		{"missing alloc", "GET", "/v1/alloc/nope", "", 404, "", `allocation "nope" does not exist`},
		{"no route", "GET", "/v1/nothing", "", 404, "", "no route for GET /v1/nothing"},
		{"wrong method", "PATCH", "/v1/volumes", "", 405, "", "method PATCH not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, api.Config{})
			r := f.do(t, tt.method, tt.path, tt.body)
			if r.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d: %s", r.status, tt.wantStatus, r.body)
			}
			e := r.errorBody(t)
			if e.Field != tt.wantField {
				t.Errorf("field = %q, want %q (%s)", e.Field, tt.wantField, e.Error)
			}
			if !strings.Contains(e.Error, tt.wantMsg) {
				t.Errorf("error = %q, want it to contain %q", e.Error, tt.wantMsg)
			}
			// Bad input never reaches the backend (state untouched).
			if m := f.backend.methods(); m != "" {
				t.Errorf("backend was called: %s", m)
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	f := newFixture(t, api.Config{MaxBodyBytes: 64})
	body := `{"volumes":[{"id":"` + strings.Repeat("v", 100) + `"}]}`
	r := f.do(t, "PUT", "/v1/volumes", body)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d, want 413: %s", r.status, r.body)
	}
	if e := r.errorBody(t); !strings.Contains(e.Error, "limit of 64 bytes") {
		t.Errorf("error = %q, want it to name the limit", e.Error)
	}
	if m := f.backend.methods(); m != "" {
		t.Errorf("backend was called: %s", m)
	}
	// A body within the limit passes.
	if r := f.do(t, "PUT", "/v1/volumes", `{"volumes":[{"id":"v"}]}`); r.status != http.StatusOK {
		t.Errorf("small body: status %d: %s", r.status, r.body)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantField  string
		wantCode   string
	}{
		{"not found", structs.NotFound("volume", "default/x"), 404, "", ""},
		{"conflict", structs.Conflict("volume %q in use by 1 allocation", "x"), 409, "", ""},
		{"no leader", fmt.Errorf("apply: %w", structs.ErrNoLeader), 503, "", ""},
		// A commit that could not be confirmed (a
		// cancelled wait, SIGTERM) is a retryable 503, never a 500.
		{"outcome unknown", fmt.Errorf("apply: %w (%w)", structs.ErrOutcomeUnknown, context.DeadlineExceeded), 503, "", ""},
		{"validation", fmt.Errorf("register: %w", structs.Invalid("plugin_id", "unknown plugin %q", "p")), 400, "plugin_id", ""},
		{"grpc", fmt.Errorf("probe: %w", status.Error(codes.Unavailable, "connection refused")), 502, "", "Unavailable"},
		{"deadline", fmt.Errorf("probe: %w", context.DeadlineExceeded), 504, "", ""},
		{"other", errors.New("disk on fire"), 500, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, api.Config{})
			f.backend.err = tt.err
			for _, req := range []struct{ method, path, body string }{
				{"PUT", "/v1/volumes", `{"volumes":[{"id":"v"}]}`},
				{"DELETE", "/v1/volume/vol1", ""},
				{"PUT", "/v1/volume/vol1/claim", `{"alloc_id":"a","node_id":"n","mode":"read"}`},
				{"PUT", "/v1/plugins", `{"plugin":{"id":"p"}}`},
				{"PUT", "/v1/system/gc", ""},
			} {
				r := f.do(t, req.method, req.path, req.body)
				if r.status != tt.wantStatus {
					t.Errorf("%s %s: status = %d, want %d", req.method, req.path, r.status, tt.wantStatus)
				}
				e := r.errorBody(t)
				if e.Error != tt.err.Error() || e.Field != tt.wantField || e.Code != tt.wantCode {
					t.Errorf("%s %s: body = %+v", req.method, req.path, e)
				}
			}
		})
	}
}

func TestStoreErrorAndNoLeader(t *testing.T) {
	f := newFixture(t, api.Config{})
	f.store.failWith = errors.New("snapshot broke")
	if r := f.do(t, "GET", "/v1/volumes", ""); r.status != 500 || r.errorBody(t).Error != "snapshot broke" {
		t.Errorf("store error: %d %s", r.status, r.body)
	}
	f.backend.leader, f.backend.isLeader = "", false
	if r := f.do(t, "GET", "/v1/status/leader", ""); r.status != 503 {
		t.Errorf("no leader: status %d, want 503", r.status)
	}
}

func TestBlockingQueryWakesOnWrite(t *testing.T) {
	tests := []struct {
		name, path, table string
		write             func(f *fakeStore)
		want              string
	}{
		{"volumes", "/v1/volumes?index=5", "volumes", func(f *fakeStore) {
			f.volumes = append(f.volumes, &structs.Volume{Namespace: "default", ID: "vol3"})
		}, `"id": "vol3"`},
		{"events since", "/v1/events?index=5", "events", func(f *fakeStore) {
			f.events = append(f.events, &structs.Event{Index: 9, Type: "claim-gc", Message: "gc"})
		}, `"message": "gc"`},
		{"one alloc", "/v1/alloc/a1?index=6&wait=1m", "allocs", func(f *fakeStore) {
			f.allocs[0] = &structs.Alloc{ID: "a1", ClientStatus: structs.AllocLost}
		}, `"client_status": "lost"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, api.Config{})
			got := make(chan response, 1)
			go func() { got <- doCtx(t, context.Background(), f.ts.URL, "GET", tt.path, "") }()
			<-f.store.waiting // the query is parked on the store
			select {
			case r := <-got:
				t.Fatalf("query answered before any write: %d %s", r.status, r.body)
			default:
			}
			f.store.write(tt.table, 9, tt.write)
			r := <-got
			if r.status != 200 || r.header.Get(api.IndexHeader) != "9" || !strings.Contains(r.body, tt.want) {
				t.Fatalf("after write: %d index %q: %s", r.status, r.header.Get(api.IndexHeader), r.body)
			}
			if tt.name == "events since" && strings.Contains(r.body, `"message": "taken"`) {
				t.Errorf("events before ?index= returned: %s", r.body)
			}
		})
	}
}

func TestBlockingQueryIndexNeverZero(t *testing.T) {
	f := newFixture(t, api.Config{})
	f.store.index = map[string]uint64{}
	r := f.do(t, "GET", "/v1/nodes", "")
	if got := r.header.Get(api.IndexHeader); got != "1" {
		t.Errorf("index header = %q, want 1 for an empty table", got)
	}
}

// serve runs the fixture's server on a fresh loopback listener; served
// receives what Serve returned.
func serve(t *testing.T, f *fixture) (net.Listener, <-chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- f.srv.Serve(l) }()
	return l, served
}

func TestShutdownEndsBlockingQuery(t *testing.T) {
	f := newFixture(t, api.Config{Addr: "127.0.0.1:0"})
	l, served := serve(t, f)
	got := make(chan response, 1)
	go func() {
		got <- doCtx(t, context.Background(), "http://"+l.Addr().String(), "GET", "/v1/volumes?index=99", "")
	}()
	<-f.store.waiting
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
	<-got // the parked query ended rather than holding shutdown
	if f.srv.Addr() != l.Addr().String() {
		t.Errorf("Addr = %q", f.srv.Addr())
	}
}

// A connection that never sent a request does not hold Shutdown: net/http
// counts it as busy for its first 5 s, which used to spend the whole
// deadline an agent's shutdown shares with its module runtime (a flaky
// "api: shutdown: context deadline exceeded" in the agent tests).
func TestShutdownIgnoresConnectionsWithoutRequests(t *testing.T) {
	f := newFixture(t, api.Config{Addr: "127.0.0.1:0"})
	l, served := serve(t, f)
	// One request completes, so the server is up; then a bare connection.
	if r := doCtx(t, context.Background(), "http://"+l.Addr().String(), "GET", "/v1/status/leader", ""); r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	bare, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	// Shorter than net/http's 5 s grace for new connections: without the
	// fix this deadline always passes first.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a connection that sent nothing: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

func TestStartStopsWithContext(t *testing.T) {
	f := newFixture(t, api.Config{Addr: "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	if err := f.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := doCtx(t, context.Background(), "http://"+f.srv.Addr(), "GET", "/v1/status/leader", "")
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	if err := f.srv.Start(ctx); err == nil {
		t.Error("second Start succeeded")
	}
	cancel()
	// Once ctx ends the listener closes: wait for a refused connection.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", f.srv.Addr())
		if err != nil {
			break
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatal("server still accepting after ctx ended")
		}
		runtime.Gosched()
	}
}

// setTestContentType sets what the CLI sends: JSON on every PUT and POST
// and on a DELETE with a body, octet-stream on the snapshot upload.
func setTestContentType(req *http.Request, hasBody bool) {
	if req.Header.Get("Content-Type") != "" {
		return
	}
	switch {
	case strings.HasPrefix(req.URL.Path, "/v1/operator/snapshot") && req.Method != http.MethodGet:
		req.Header.Set("Content-Type", "application/octet-stream")
	case req.Method == http.MethodPut || req.Method == http.MethodPost || (req.Method == http.MethodDelete && hasBody):
		req.Header.Set("Content-Type", "application/json")
	}
}

// TestVolumeClaimsAlwaysInJSON: the list and the detail carry every
// volume's claims under "claims", {} for a volume without any, so a
// script reads them the same way from both (`volume status -json` seemed
// to omit claims the table showed).
func TestVolumeClaimsAlwaysInJSON(t *testing.T) {
	f := newFixture(t, api.Config{})
	f.store.volumes = append(f.store.volumes, &structs.Volume{Namespace: "default", ID: "vol-free", PluginID: "gce-pd"})
	var list []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(f.do(t, http.MethodGet, "/v1/volumes", "").body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != len(f.store.volumes) {
		t.Fatalf("list has %d volumes, want %d", len(list), len(f.store.volumes))
	}
	for _, v := range list {
		var id, ns string
		_ = json.Unmarshal(v["id"], &id)
		_ = json.Unmarshal(v["namespace"], &ns)
		claims, ok := v["claims"]
		if !ok || string(claims) == "null" {
			t.Errorf("list entry %s/%s: claims = %s, want an object", ns, id, claims)
			continue
		}
		var detail map[string]json.RawMessage
		if err := json.Unmarshal([]byte(f.do(t, http.MethodGet, "/v1/volume/"+id+"?namespace="+ns, "").body), &detail); err != nil {
			t.Fatal(err)
		}
		var a, b any
		_ = json.Unmarshal(claims, &a)
		_ = json.Unmarshal(detail["claims"], &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s/%s: list claims %s, detail claims %s", ns, id, claims, detail["claims"])
		}
	}
}

// TestRegisterNodeWarnsOfMissingController: a node whose driver advertises
// CONTROLLER_SERVICE for a plugin registered without a controller endpoint
// registers, with a Warning header saying ControllerUnpublish would be
// skipped (this was silent); a plugin with its endpoint gets none.
func TestRegisterNodeWarnsOfMissingController(t *testing.T) {
	f := newFixture(t, api.Config{})
	f.store.plugins = append(f.store.plugins, &structs.Plugin{ID: "nodeonly"})
	for _, tt := range []struct {
		plugin string
		warn   bool
	}{{"nodeonly", true}, {"gce-pd", false}} {
		body := `{"node": {"id": "n7", "status": "ready", "plugins": {"` + tt.plugin + `": {"endpoint": "unix:///tmp/n7.sock", "controller_service": true}}}}`
		r := f.do(t, http.MethodPut, "/v1/nodes", body)
		if r.status != http.StatusOK {
			t.Fatalf("register: %d %s", r.status, r.body)
		}
		got := r.header.Values("Warning")
		if !tt.warn {
			if len(got) != 0 {
				t.Errorf("plugin %s: warnings %q, want none", tt.plugin, got)
			}
			continue
		}
		if len(got) != 1 || !strings.HasPrefix(got[0], "299 volhost ") || !strings.Contains(got[0], "skip ControllerUnpublish") || !strings.Contains(got[0], tt.plugin) {
			t.Errorf("plugin %s: warnings %q, want one 299 warning naming it", tt.plugin, got)
		}
	}
}
