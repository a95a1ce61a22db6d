package api_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// hardened is an API over a real store with a plugin, a node and a volume.
type hardened struct {
	b   *apitest.StoreBackend
	srv *api.Server
	ts  *httptest.Server
}

// probeFailing fails every probe the way host/server does, with the dial
// error in the chain.
type probeFailing struct{ *apitest.StoreBackend }

func (p probeFailing) RegisterPlugin(_ context.Context, pl *structs.Plugin) (*structs.Plugin, error) {
	return nil, &structs.ProbeError{Field: "controller_endpoint", Endpoint: pl.ControllerEndpoint,
		Err: errors.New("dial unix /etc/passwd: connect: connection refused")}
}

func newHardened(t *testing.T, cfg api.Config) *hardened {
	t.Helper()
	b := apitest.NewStoreBackend()
	ctx := context.Background()
	if _, err := b.RegisterPlugin(ctx, &structs.Plugin{ID: "gce-pd"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RegisterVolumes(ctx, []*structs.Volume{testVolume("vol1")}); err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(cfg, b.Store, probeFailing{b}, nil)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &hardened{b: b, srv: srv, ts: ts}
}

func (h *hardened) digest(t *testing.T) string {
	t.Helper()
	d, err := h.b.Store.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (h *hardened) send(t *testing.T, method, path, body string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

const nodeDown = `{"status":"down"}`

// Each refusal: its status, one message naming the cause, and no change.
func TestHardenedRefusals(t *testing.T) {
	h := newHardened(t, api.Config{})
	host := strings.TrimPrefix(h.ts.URL, "http://")
	vol := func(id, extra string) string {
		return `{"volumes":[{"id":` + id + `,"external_id":"d","plugin_id":"gce-pd","access_mode":"single-node-writer","attachment_mode":"file-system"` + extra + `}]}`
	}
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		msg, field               string
	}{
		{"text/plain write (CSRF form)", "PUT", "/v1/volumes", vol(`"v2"`, ""), []string{"Content-Type", "text/plain"}, 415, "needs Content-Type application/json, got text/plain", ""},
		{"no content type", "POST", "/v1/system/gc", "", nil, 415, "got none", ""},
		{"form post", "POST", "/v1/volumes", "a=b", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "application/json", ""},
		{"foreign origin", "PUT", "/v1/volumes", vol(`"v2"`, ""), []string{"Content-Type", "application/json", "Origin", "https://evil.example"}, 403, "cross-origin request from \"https://evil.example\" refused", ""},
		{"null origin", "PUT", "/v1/volumes", vol(`"v2"`, ""), []string{"Content-Type", "application/json", "Origin", "null"}, 403, "cross-origin", ""},
		{"rebinding host", "GET", "/v1/volumes", "", []string{"Host", "evil.example:4747"}, 403, "DNS rebinding", ""},
		{"body over the limit", "PUT", "/v1/volumes", vol(`"v2"`, `,"name":"`+strings.Repeat("x", 2<<20)+`"`), []string{"Content-Type", "application/json"}, 413, "exceeds the limit of 1048576 bytes", ""},
		{"dot ID", "PUT", "/v1/volumes", vol(`"."`, ""), []string{"Content-Type", "application/json"}, 400, "reserved", "volumes[0].id"},
		{"dot-dot ID", "PUT", "/v1/volumes", vol(`".."`, ""), []string{"Content-Type", "application/json"}, 400, "reserved", "volumes[0].id"},
		{"zero-width space", "PUT", "/v1/volumes", vol(`"vol\u200b1"`, ""), []string{"Content-Type", "application/json"}, 400, "U+200B", "volumes[0].id"},
		{"bidi override", "PUT", "/v1/volumes", vol(`"\u202e1lov"`, ""), []string{"Content-Type", "application/json"}, 400, "U+202E", "volumes[0].id"},
		{"external ID too long", "PUT", "/v1/volumes", strings.Replace(vol(`"v2"`, ""), `"external_id":"d"`, `"external_id":"`+strings.Repeat("d", 1025)+`"`, 1), []string{"Content-Type", "application/json"}, 400, "at most 1024", "volumes[0].external_id"},
		{"context value too long", "PUT", "/v1/volumes", vol(`"v2"`, `,"context":{"k":"`+strings.Repeat("c", 5000)+`"}`), []string{"Content-Type", "application/json"}, 400, "at most 4096", "volumes[0].context[k]"},
		{"too many parameters", "PUT", "/v1/volumes", vol(`"v2"`, `,"parameters":{`+manyEntries(33)+`}`), []string{"Content-Type", "application/json"}, 400, "at most 32", "volumes[0].parameters"},
		{"path ID with a format character", "GET", "/v1/volume/vol%E2%80%8B1", "", nil, 400, "U+200B", "volume_id"},
		{"bad per_page", "GET", "/v1/volumes?per_page=0", "", nil, 400, "positive integer", "per_page"},
		{"bad next_token", "GET", "/v1/volumes?next_token=***", "", nil, 400, "token", "next_token"},
		{"probe detail hidden from a forwarded caller", "PUT", "/v1/plugins", `{"plugin":{"id":"p2","controller_endpoint":"unix:///etc/passwd"}}`, []string{"Content-Type", "application/json", api.ForwardedHeader, "s2"}, 400, "controller_endpoint: endpoint unreachable: the dial error is in the agent's log", "controller_endpoint"},
		{"node status as a form", "POST", "/v1/node/n1/status", nodeDown, []string{"Content-Type", "text/plain", "Origin", "http://" + host}, 415, "application/json", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.digest(t)
			r := h.send(t, c.method, c.path, c.body, c.hdr...)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			var er api.ErrorResponse
			if err := json.Unmarshal([]byte(r.body), &er); err != nil {
				t.Fatalf("not a JSON error: %s", r.body)
			}
			if !strings.Contains(er.Error, c.msg) || er.Field != c.field {
				t.Fatalf("error %q field %q, want %q field %q", er.Error, er.Field, c.msg, c.field)
			}
			if strings.Contains(er.Error, "passwd") || strings.Contains(er.Error, "refused") && c.status == 400 {
				t.Fatalf("probe detail leaked: %s", er.Error)
			}
			if h.digest(t) != before {
				t.Fatal("state changed")
			}
		})
	}
	// The same request, as the CLI sends it, passes: the guards refuse the
	// browser's shape of a request, not the request.
	if r := h.send(t, "PUT", "/v1/volumes", vol(`"v2"`, ""), "Content-Type", "application/json; charset=utf-8", "Origin", "http://"+host); r.status != 200 {
		t.Fatalf("same-origin JSON write: %d %s", r.status, r.body)
	}
	if r := h.send(t, "GET", "/v1/volumes", "", "Host", "localhost:4747"); r.status != 200 {
		t.Fatalf("localhost Host: %d %s", r.status, r.body)
	}
}

func manyEntries(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(parts, ",")
}

func TestAllowedHostsAndProbeDetailHook(t *testing.T) {
	h := newHardened(t, api.Config{
		AllowedHosts:     []string{"volhost.internal"},
		ProbeErrorDetail: func(r *http.Request) bool { return r.Header.Get("X-Test-Operator") == "yes" },
	})
	if r := h.send(t, "GET", "/v1/volumes", "", "Host", "VOLHOST.internal:4747"); r.status != 200 {
		t.Fatalf("allowed host: %d %s", r.status, r.body)
	}
	body := `{"plugin":{"id":"p2","controller_endpoint":"unix:///etc/passwd"}}`
	r := h.send(t, "PUT", "/v1/plugins", body, "Content-Type", "application/json", "X-Test-Operator", "yes")
	if r.status != 400 || !strings.Contains(r.body, "/etc/passwd: connect: connection refused") {
		t.Fatalf("operator should see the probe detail: %d %s", r.status, r.body)
	}
}

// With ACLs off, the dial error of a failed probe is quoted to a caller on
// the agent's own host (who could list its sockets anyway) and hidden from
// a remote one, who must not map the host's files and ports.
func TestProbeDetailLoopbackOnly(t *testing.T) {
	h := newHardened(t, api.Config{})
	body := `{"plugin":{"id":"p2","controller_endpoint":"unix:///etc/passwd"}}`
	for _, c := range []struct {
		remote string
		detail bool
	}{{"127.0.0.1:5555", true}, {"[::1]:5555", true}, {"192.0.2.1:5555", false}, {"10.0.0.7:5555", false}} {
		req := httptest.NewRequest(http.MethodPut, "/v1/plugins", strings.NewReader(body))
		req.Host, req.RemoteAddr = "127.0.0.1", c.remote
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.srv.Handler().ServeHTTP(rec, req)
		got := rec.Body.String()
		if rec.Code != 400 || strings.Contains(got, "connection refused") != c.detail {
			t.Errorf("from %s: %d %s, want the dial error quoted: %v", c.remote, rec.Code, got, c.detail)
		}
		if !c.detail && !strings.Contains(got, "endpoint unreachable: the dial error is in the agent's log") {
			t.Errorf("from %s: %s does not say where the detail is", c.remote, got)
		}
	}
}

// A body declared over the limit is refused before one byte of it is read.
func TestDeclaredOversizedBodyIsNotRead(t *testing.T) {
	h := newHardened(t, api.Config{})
	body := &countingReader{n: 100 << 20}
	req := httptest.NewRequest(http.MethodPut, "/v1/volumes", body)
	req.Host = "127.0.0.1"
	req.ContentLength = 2 << 30
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	before := h.digest(t)
	h.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 413 || !strings.Contains(rec.Body.String(), "exceeds the limit of 1048576 bytes") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if body.read != 0 {
		t.Fatalf("read %d bytes of a body declared too large", body.read)
	}
	if h.digest(t) != before {
		t.Fatal("state changed")
	}
}

type countingReader struct{ n, read int }

func (c *countingReader) Read(p []byte) (int, error) {
	if c.read >= c.n {
		return 0, io.EOF
	}
	k := min(len(p), c.n-c.read)
	c.read += k
	return k, nil
}

// ?wait=0s answers at once even with an index far ahead: on a fake clock
// a query that waited would never return.
func TestWaitZeroAnswersNow(t *testing.T) {
	_, _, ts := realStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := doCtx(t, ctx, ts.URL, "GET", "/v1/volumes?index=999&wait=0s", "")
	if r.status != 200 || !strings.Contains(r.body, "vol1") {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// Past MaxBlockingQueries a blocking read is 429; a non-blocking read and
// a blocking read once the slot is free still pass.
func TestBlockingQueryCap(t *testing.T) {
	clk := clockwork.NewFakeClock()
	st := state.NewStore(state.WithClock(clk))
	apply(t, st, 1, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "gce-pd"}})
	ts := httptest.NewServer(api.NewServer(api.Config{MaxBlockingQueries: 1}, st, &fakeBackend{}, nil).Handler())
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan response, 1)
	go func() { first <- doCtx(t, ctx, ts.URL, "GET", "/v1/plugins?index=1&wait=1m", "") }()
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the first query parked
		t.Fatal(err)
	}
	r := doCtx(t, ctx, ts.URL, "GET", "/v1/plugins?index=1&wait=1m", "")
	if r.status != 429 || !strings.Contains(r.body, "too many blocking queries") || r.header.Get("Retry-After") == "" {
		t.Fatalf("second blocking query: %d %s", r.status, r.body)
	}
	if r := doCtx(t, ctx, ts.URL, "GET", "/v1/plugins", ""); r.status != 200 {
		t.Fatalf("non-blocking read: %d", r.status)
	}
	apply(t, st, 2, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p2"}})
	if r := <-first; r.status != 200 {
		t.Fatalf("first query: %d", r.status)
	}
	if r := doCtx(t, ctx, ts.URL, "GET", "/v1/plugins?index=1&wait=1m", ""); r.status != 200 {
		t.Fatalf("blocking read after the slot freed: %d %s", r.status, r.body)
	}
}

func TestPagination(t *testing.T) {
	h := newHardened(t, api.Config{MaxPerPage: 3})
	var vols []*structs.Volume
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		vols = append(vols, testVolume(id))
	}
	if _, err := h.b.RegisterVolumes(context.Background(), vols); err != nil {
		t.Fatal(err)
	}
	var got []string
	path := "/v1/volumes?per_page=2"
	for pages := 0; ; pages++ {
		r := h.send(t, "GET", path, "")
		var page []*structs.Volume
		if err := json.Unmarshal([]byte(r.body), &page); err != nil || r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if len(page) > 2 {
			t.Fatalf("page of %d, asked for 2", len(page))
		}
		for _, v := range page {
			got = append(got, v.ID)
		}
		tok := r.header.Get(api.NextTokenHeader)
		if tok == "" {
			break
		}
		path = "/v1/volumes?per_page=2&next_token=" + tok
	}
	if want := "a b c d e f g vol1"; strings.Join(got, " ") != want {
		t.Fatalf("pages gave %v, want %s", got, want)
	}
	// per_page is capped at MaxPerPage, which is also the default.
	r := h.send(t, "GET", "/v1/volumes", "")
	var page []*structs.Volume
	_ = json.Unmarshal([]byte(r.body), &page)
	if len(page) != 3 || r.header.Get(api.NextTokenHeader) == "" {
		t.Fatalf("default page: %d items, token %q", len(page), r.header.Get(api.NextTokenHeader))
	}
	// The client (and so the CLI) follows every page.
	cl, err := client.New(h.ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	all, _, err := cl.Volumes(context.Background(), "", "", &client.QueryOptions{PerPage: 2})
	if err != nil || len(all) != 8 {
		t.Fatalf("client followed pages: %d volumes, %v", len(all), err)
	}
}

// serve runs the API on a real listener (the limits live there).
func serveLimited(t *testing.T, cfg api.Config) (string, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
	b := apitest.NewStoreBackend()
	srv := api.NewServer(cfg, b.Store, b, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return l.Addr().String(), logs
}

// closedByServer reports whether the server closed c without a word
// within wait. The server closes before it serves the next connection, so
// a closed connection reads EOF at once; wait only bounds the other case.
func closedByServer(t *testing.T, c net.Conn, wait time.Duration) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}

func dialN(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

func leaderStatus(addr string) (int, error) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + "/v1/status/leader")
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Past a client's cap its new connections are closed at once (and logged
// at WARN), the ones it holds keep working.
func TestPerClientConnectionCap(t *testing.T) {
	addr, logs := serveLimited(t, api.Config{MaxConnsPerClient: 3})
	held := dialN(t, addr, 3)
	extra := dialN(t, addr, 1)[0]
	if !closedByServer(t, extra, 5*time.Second) {
		t.Fatal("a connection over the client's cap was kept open")
	}
	if !strings.Contains(logs.String(), "client connection limit reached") {
		t.Fatalf("no WARN line: %q", logs.String())
	}
	// A held connection still serves.
	if _, err := io.WriteString(held[0], "GET /v1/status/leader HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufioReader(held[0]), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("held connection: %d", resp.StatusCode)
	}
}

// At the total cap an idle connection makes room: a flood of idle
// connections cannot lock the health check out.
func TestTotalCapEvictsIdle(t *testing.T) {
	addr, logs := serveLimited(t, api.Config{MaxConns: 4, MaxConnsPerClient: 100})
	idle := dialN(t, addr, 4)
	for i := range 3 {
		code, err := leaderStatus(addr)
		if err != nil || code != 200 {
			t.Fatalf("health check %d at the cap: %d %v", i, code, err)
		}
	}
	closed := 0
	for _, c := range idle {
		if closedByServer(t, c, 100*time.Millisecond) {
			closed++
		}
	}
	if closed == 0 {
		t.Fatal("no idle connection was evicted")
	}
	if !strings.Contains(logs.String(), "connection limit reached") {
		t.Fatalf("no WARN line: %q", logs.String())
	}
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// A claim flood on one volume leaves another's history and the audit trail
// readable through the API, filtered and paged.
func TestEventsRouteFiltersAndPages(t *testing.T) {
	h := newHardened(t, api.Config{})
	idx := h.b.Store.LatestIndex()
	appendEv := func(evs ...*structs.Event) {
		idx++
		if _, err := h.b.Store.Apply(idx, structs.EventAppendType, &structs.EventAppendRequest{Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	appendEv(&structs.Event{Type: structs.EventClaimTransition, Namespace: "default", VolumeID: "quiet", Message: "q"},
		&structs.Event{Type: structs.EventAudit, Message: "restore", Fields: map[string]string{"action": "snapshot-restore", "accessor": "anonymous"}})
	for i := range 300 {
		appendEv(&structs.Event{Type: structs.EventClaimTransition, Namespace: "default", VolumeID: "busy", Message: fmt.Sprint(i)})
	}
	get := func(path string) ([]*structs.Event, string) {
		t.Helper()
		r := h.send(t, "GET", path, "")
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		var evs []*structs.Event
		if err := json.Unmarshal([]byte(r.body), &evs); err != nil {
			t.Fatal(err)
		}
		return evs, r.header.Get(api.NextTokenHeader)
	}
	if evs, _ := get("/v1/events?volume_id=quiet"); len(evs) != 1 || evs[0].Message != "q" {
		t.Fatalf("quiet volume: %+v", evs)
	}
	if evs, _ := get("/v1/events?type=audit"); len(evs) != 1 || evs[0].Fields["action"] != "snapshot-restore" {
		t.Fatalf("audit: %+v", evs)
	}
	var busy []*structs.Event
	path := "/v1/events?volume_id=busy&per_page=40"
	for {
		evs, tok := get(path)
		busy = append(busy, evs...)
		if tok == "" {
			break
		}
		path = "/v1/events?volume_id=busy&per_page=40&next_token=" + tok
	}
	if len(busy) != state.DefaultEventsPerVolume || busy[0].Message != "200" || busy[len(busy)-1].Message != "299" {
		t.Fatalf("busy: %d events, %q..%q", len(busy), busy[0].Message, busy[len(busy)-1].Message)
	}
	r := h.send(t, "GET", "/v1/events?after=yesterday", "")
	if r.status != 400 || !strings.Contains(r.body, `"field": "after"`) {
		t.Fatalf("bad after: %d %s", r.status, r.body)
	}
	cl, _ := client.New(h.ts.URL, nil)
	all, _, err := cl.EventsFiltered(context.Background(), client.EventQuery{VolumeID: "busy", Namespace: "default"}, &client.QueryOptions{PerPage: 7})
	if err != nil || len(all) != state.DefaultEventsPerVolume {
		t.Fatalf("client pages: %d %v", len(all), err)
	}
}

// A long poll outlives ReadTimeout: the server-wide ReadTimeout bounds
// reading the request, never a blocking query's wait. The test has to let
// ReadTimeout pass in real time.
func TestBlockingQueryOutlivesReadTimeout(t *testing.T) {
	clk := clockwork.NewFakeClock()
	st := state.NewStore(state.WithClock(clk))
	apply(t, st, 1, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p1"}})
	srv := api.NewServer(api.Config{ReadTimeout: 100 * time.Millisecond}, st, &fakeBackend{}, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make(chan response, 1)
	go func() { res <- doCtx(t, ctx, "http://"+l.Addr().String(), "GET", "/v1/plugins?index=1&wait=1m", "") }()
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		t.Fatalf("the long poll ended early: %d %s", r.status, r.body)
	case <-time.After(300 * time.Millisecond): // three ReadTimeouts
	}
	apply(t, st, 2, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p2"}})
	if r := <-res; r.status != 200 || !strings.Contains(r.body, "p2") {
		t.Fatalf("long poll: %d %s", r.status, r.body)
	}
}

// tok is a next_token of the form pageList.token makes: base64url(list ":" key).
func tok(list, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(list + ":" + key))
}

// Bad query input, by class: an enumerated value the route does not know,
// a parameter it does not take (or given twice), and a next_token it did
// not hand out. Each is one 400 naming the parameter, and nothing changes.
// Before, every "silent" case below answered 200 (an empty list, every
// item, or the volume in "default").
func TestBadQueryParameters(t *testing.T) {
	h := newHardened(t, api.Config{})
	jsonCT := []string{"Content-Type", "application/json"}
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		field                    string
		msg                      []string
	}{
		// Enumerated values.
		{"unknown event type (silent)", "GET", "/v1/events?type=zzz", "", nil, "type",
			[]string{`must be one of claim-transition, claim-failed, claim-held,`, "node-fence, scheduler, audit", `got "zzz"`}},
		{"event namespace without volume (silent)", "GET", "/v1/events?namespace=prod", "", nil, "namespace", []string{"only with volume_id"}},
		{"claim state", "GET", "/v1/volumes?claim_state=freed", "", nil, "claim_state", []string{"must be one of publishing, taken,", "unclaimed", `got "freed"`}},
		{"claim mode", "PUT", "/v1/volume/vol1/claim", `{"alloc_id":"a1","node_id":"n1","mode":"rw"}`, jsonCT, "mode", []string{`must be one of read, write, got "rw"`}},
		{"node status", "PUT", "/v1/node/n1/status", `{"status":"sleepy"}`, jsonCT, "status", []string{`must be one of ready, down, got "sleepy"`}},
		{"bool-ish force", "DELETE", "/v1/volume/vol1?force=maybe", "", nil, "force", []string{`not a boolean: "maybe"`}},
		{"bool-ish stuck", "GET", "/v1/volumes?stuck=maybe", "", nil, "stuck", []string{`not a boolean`}},
		{"bool-ish stale", "GET", "/v1/nodes?stale=perhaps", "", nil, "stale", []string{`not a boolean`}},
		{"negative per_page", "GET", "/v1/allocs?per_page=-1", "", nil, "per_page", []string{"positive integer"}},
		{"index not a number", "GET", "/v1/events?index=x", "", nil, "index", []string{`not an unsigned integer: "x"`}},
		{"wait forever", "GET", "/v1/plugins?wait=forever", "", nil, "wait", []string{"not a duration"}},

		// Unknown and repeated parameters.
		{"events since (silent)", "GET", "/v1/events?since=abc", "", nil, "since",
			[]string{"unknown query parameter", "GET /v1/events takes only after, before, index, namespace, next_token, per_page, stale, type, volume_id, wait"}},
		{"volumes state (silent)", "GET", "/v1/volumes?state=taken", "", nil, "state", []string{"unknown query parameter", "claim_state"}},
		{"allocs node (silent)", "GET", "/v1/allocs?node=n1", "", nil, "node", []string{"unknown query parameter", "node_id"}},
		{"nodes status (silent)", "GET", "/v1/nodes?status=down", "", nil, "status", []string{"unknown query parameter", "GET /v1/nodes takes only index, next_token, per_page, stale, wait"}},
		{"plugins filter (silent)", "GET", "/v1/plugins?search=gce", "", nil, "search", []string{"unknown query parameter"}},
		{"leftovers filter (silent)", "GET", "/v1/volumes/leftovers?volume_id=vol1", "", nil, "volume_id", []string{"unknown query parameter"}},
		{"stats filter (silent)", "GET", "/v1/stats?plugin_id=gce-pd", "", nil, "plugin_id", []string{"unknown query parameter"}},
		{"misspelt namespace on a read (silent)", "GET", "/v1/volume/vol1?namesapce=prod", "", nil, "namesapce", []string{"unknown query parameter", "namespace"}},
		{"misspelt namespace on a delete (acted on default)", "DELETE", "/v1/volume/vol1?namesapce=prod", "", nil, "namesapce", []string{"unknown query parameter"}},
		{"misspelt force", "DELETE", "/v1/volume/vol1?froce=true", "", nil, "froce", []string{"unknown query parameter", "takes only force, namespace"}},
		{"parameter on a route that takes none", "PUT", "/v1/system/gc?all=true", "", jsonCT, "all", []string{"PUT /v1/system/gc takes no query parameters"}},
		{"repeated type (second ignored)", "GET", "/v1/events?type=audit&type=module", "", nil, "type", []string{"given 2 times"}},
		{"nameless parameter", "GET", "/v1/volumes?=x", "", nil, "", []string{"without a name"}},

		// Tokens a list did not hand out.
		{"volumes: plain base64 (silent)", "GET", "/v1/volumes?next_token=" + base64.RawURLEncoding.EncodeToString([]byte("default\x00vol1")), "", nil, "next_token", []string{"not a token this list handed out", "/v1/volumes"}},
		{"volumes: not base64", "GET", "/v1/volumes?next_token=***", "", nil, "next_token", []string{"not a token this list handed out"}},
		{"volumes: key of the wrong form", "GET", "/v1/volumes?next_token=" + tok("volumes", "novolume"), "", nil, "next_token", nil},
		{"allocs: any base64 (silent)", "GET", "/v1/allocs?next_token=" + base64.RawURLEncoding.EncodeToString([]byte("zzz")), "", nil, "next_token", nil},
		{"nodes: a volumes token", "GET", "/v1/nodes?next_token=" + tok("volumes", "default\x00vol1"), "", nil, "next_token", nil},
		{"plugins: an allocs token", "GET", "/v1/plugins?next_token=" + tok("allocs", "a1"), "", nil, "next_token", nil},
		{"leftovers: any base64 (silent)", "GET", "/v1/volumes/leftovers?next_token=" + base64.RawURLEncoding.EncodeToString([]byte("a")), "", nil, "next_token", nil},
		{"events: a volumes token", "GET", "/v1/events?next_token=" + tok("volumes", "default\x00vol1"), "", nil, "next_token", nil},
		{"events: sequence not hex", "GET", "/v1/events?next_token=" + tok("events", "xyz"), "", nil, "next_token", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.digest(t)
			r := h.send(t, c.method, c.path, c.body, c.hdr...)
			if r.status != 400 {
				t.Fatalf("status %d, want 400: %s", r.status, r.body)
			}
			var er api.ErrorResponse
			if err := json.Unmarshal([]byte(r.body), &er); err != nil {
				t.Fatalf("not a JSON error: %s", r.body)
			}
			if er.Field != c.field {
				t.Errorf("field %q, want %q (%s)", er.Field, c.field, er.Error)
			}
			for _, m := range c.msg {
				if !strings.Contains(er.Error, m) {
					t.Errorf("error %q lacks %q", er.Error, m)
				}
			}
			if h.digest(t) != before {
				t.Fatal("state changed")
			}
		})
	}
	// The volume the misspelt delete named is still there.
	if r := h.send(t, "GET", "/v1/volume/vol1", ""); r.status != 200 {
		t.Fatalf("vol1 after the refused deletes: %d %s", r.status, r.body)
	}
}

// Every list hands out tokens it takes back, and every accepted value of
// an enumerated filter is accepted: the checks refuse only bad input.
func TestQueryParametersAccepted(t *testing.T) {
	h := newHardened(t, api.Config{})
	ctx := context.Background()
	if _, err := h.b.RegisterPlugin(ctx, &structs.Plugin{ID: "p2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.b.RegisterVolumes(ctx, []*structs.Volume{testVolume("vol2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.b.RegisterNode(ctx, &structs.Node{ID: "n1", Status: structs.NodeReady}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.b.UpsertAllocs(ctx, []*structs.Alloc{{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning},
		{ID: "a2", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning}}); err != nil {
		t.Fatal(err)
	}
	evs := []*structs.Event{{Type: structs.EventModule, Message: "m1"}, {Type: structs.EventModule, Message: "m2"}}
	if _, err := h.b.Store.Apply(h.b.Store.LatestIndex()+1, structs.EventAppendType, &structs.EventAppendRequest{Events: evs}); err != nil {
		t.Fatal(err)
	}
	for _, list := range []string{"/v1/volumes", "/v1/plugins", "/v1/allocs", "/v1/events"} {
		r := h.send(t, "GET", list+"?per_page=1", "")
		next := r.header.Get(api.NextTokenHeader)
		if r.status != 200 || next == "" {
			t.Fatalf("%s first page: %d, token %q: %s", list, r.status, next, r.body)
		}
		if r := h.send(t, "GET", list+"?per_page=1&next_token="+next, ""); r.status != 200 || r.body == "[]\n" {
			t.Fatalf("%s with its own token: %d %s", list, r.status, r.body)
		}
	}
	for _, ty := range structs.EventTypes {
		if r := h.send(t, "GET", "/v1/events?type="+ty, ""); r.status != 200 {
			t.Errorf("type=%s: %d %s", ty, r.status, r.body)
		}
	}
	for _, path := range []string{
		"/v1/volumes?namespace=default&plugin_id=gce-pd&claim_state=unclaimed&stuck=false&search=vol&per_page=5&index=1&wait=0s&stale=true",
		"/v1/events?volume_id=vol1&namespace=default&type=claim-transition&after=2026-01-01T00:00:00Z&before=2027-01-01T00:00:00Z",
		"/v1/allocs?node_id=n1", "/v1/volume/vol1?namespace=default&index=1&wait=0s", "/v1/stats?namespace=default",
	} {
		if r := h.send(t, "GET", path, ""); r.status != 200 {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
	// An empty parameter is no filter: ?stuck= lists the stuck volume too
	// (it read as stuck=false).
	if _, err := h.b.Store.Apply(h.b.Store.LatestIndex()+1, structs.VolumeStuckType, &structs.VolumeStuckRequest{
		Namespace: "default", VolumeID: "vol1", Stuck: &structs.Stuck{Since: time.Now(), Reason: "test"}}); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{"?stuck=": `"vol1"`, "?stuck=true": `"vol1"`, "?stuck=false": `"vol2"`} {
		r := h.send(t, "GET", "/v1/volumes"+q, "")
		if r.status != 200 || !strings.Contains(r.body, want) {
			t.Errorf("%s: %d, want %s in %s", q, r.status, want, r.body)
		}
	}
}
