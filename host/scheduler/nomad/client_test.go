package nomad

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/internal/testutil"
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

// TestClientStream: the event stream asked from the index given, for the
// Node and Allocation topics of the configured namespace; an allocation
// of another namespace (a wildcard stream carries them all) is dropped,
// and each object keeps its client and desired status apart.
func TestClientStream(t *testing.T) {
	var mu sync.Mutex
	var query url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/event/stream" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		query = r.URL.Query()
		mu.Unlock()
		alloc := func(id, ns string) string {
			return `{"Topic":"Allocation","Type":"AllocationUpdated","Index":7,"Payload":{"Allocation":{"ID":"` + id + `","Namespace":"` + ns +
				`","NodeID":"id-n1","NodeName":"n1","JobID":"web","TaskGroup":"g","ClientStatus":"running","DesiredStatus":"stop","ModifyIndex":7}}}`
		}
		_, _ = io.WriteString(w, `{"Index":7,"Events":[`+
			`{"Topic":"Node","Type":"NodeStreamEvent","Index":7,"Payload":{"Node":{"ID":"id-n1","Name":"n1","Status":"down","ModifyIndex":6}}},`+
			alloc("a1", "prod")+`,`+alloc("a2", "dev")+"]}\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	set, err := Config{Address: srv.URL, Namespaces: []string{"prod"}}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(set)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := c.Stream(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	wantNode := Node{ID: "id-n1", Name: "n1", Status: nodeDown, ModifyIndex: 6}
	wantAlloc := Alloc{ID: "a1", Namespace: "prod", NodeID: "id-n1", NodeName: "n1", JobID: "web", TaskGroup: "g",
		ClientStatus: clientRunning, DesiredStatus: "stop", ModifyIndex: 7}
	if b.Index != 7 || len(b.Nodes) != 1 || b.Nodes[0] != wantNode || len(b.Allocs) != 1 || b.Allocs[0] != wantAlloc {
		t.Fatalf("batch = %+v", b)
	}
	mu.Lock()
	defer mu.Unlock()
	topics := query["topic"]
	slices.Sort(topics)
	if query.Get("index") != "7" || query.Get("namespace") != "prod" || strings.Join(topics, ",") != "Allocation:*,Node:*" {
		t.Fatalf("stream asked with %v", query)
	}
}

// TestClientMeta: the meta the bridge reads volumes from is the job's
// with the allocation's task group's over it, as Nomad merges them for a
// task (NOMAD_META_*).
func TestClientMeta(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/allocation/a1" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"ID":"a1","TaskGroup":"g","Job":{"ID":"web","Meta":{"volhost_volume_data":"job-vol","team":"x"},`+
			`"TaskGroups":[{"Name":"other","Meta":{"volhost_volume_x":"nope"}},{"Name":"g","Meta":{"volhost_volume_data":"group-vol"}}]}}`)
	}))
	t.Cleanup(srv.Close)
	set, err := Config{Address: srv.URL}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(set)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := c.Meta(context.Background(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"volhost_volume_data": "group-vol", "team": "x"}; !maps.Equal(meta, want) {
		t.Fatalf("meta = %v, want %v", meta, want)
	}
}

// TestClientConsistentLists: the lists are read from the Nomad leader,
// never stale from a follower: a stale list lacks an allocation the
// stream already showed, and the bridge would take it as vanished (ended)
// while it runs.
func TestClientConsistentLists(t *testing.T) {
	var mu sync.Mutex
	var queries []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.Query())
		mu.Unlock()
		w.Header().Set("X-Nomad-Index", "5")
		_, _ = io.WriteString(w, "[]")
	}))
	t.Cleanup(srv.Close)
	set, err := Config{Address: srv.URL}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(set)
	if err != nil {
		t.Fatal(err)
	}
	if _, idx, err := c.Nodes(context.Background()); err != nil || idx != 5 {
		t.Fatalf("nodes: index %d, %v", idx, err)
	}
	if _, idx, err := c.Allocs(context.Background()); err != nil || idx != 5 {
		t.Fatalf("allocs: index %d, %v", idx, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, q := range queries {
		if q.Has("stale") {
			t.Fatalf("a list read stale: %v", q)
		}
	}
}

// TestBridgeRefusedToken: a Nomad that refuses the bridge's token is one
// event and one status line naming the token, however many times the
// bridge tries again; nothing else is written.
func TestBridgeRefusedToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "ACL token not found", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t)
	set, err := Config{Address: srv.URL, Token: "wrong-token", RelistInterval: "1m"}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	h.bridge, err = New(set, Deps{Writer: h.w, Store: h.store, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	h.run(1)
	testutil.WaitFor(t, "the refused token's event", func() bool { return len(h.events("Nomad refused the token")) == 1 })
	for range 3 {
		h.advance(time.Minute)
	}
	h.advance(time.Minute)
	// The bridge is connecting while it tries again and retrying once the
	// try failed: wait for the fourth failure to be recorded.
	var st scheduler.Status
	testutil.WaitFor(t, "the fourth refusal in the status", func() bool {
		st = h.bridge.Status()
		return st.State == scheduler.StateRetrying && st.Failures >= 4
	})
	if !strings.Contains(st.LastError, `check the token of the scheduler "nomad" block`) {
		t.Fatalf("status %+v", st)
	}
	if n := len(h.events("")); n != 1 {
		t.Fatalf("%d scheduler events after %d failures, want 1", n, st.Failures)
	}
	if h.cursor() != 0 {
		t.Fatalf("cursor %d committed without Nomad", h.cursor())
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
