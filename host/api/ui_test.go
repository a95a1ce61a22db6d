package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/structs"
)

// settableClock stamps the store's writes with a time the test sets.
type settableClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *settableClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *settableClock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

// uiState builds: v1 (default) released through both steps, 2s after its
// allocation completed; v2 (default) claimed and stuck; v3 (prod) unclaimed.
func uiState(t *testing.T) (*apitest.StoreBackend, time.Time) {
	t.Helper()
	ctx := context.Background()
	b := apitest.NewStoreBackend()
	clk := &settableClock{}
	// Inside the stats window of the real clock the handler reads.
	base := time.Now().Add(-5 * time.Minute).Truncate(time.Second)
	clk.Set(base.Add(-time.Minute))
	b.Now = clk.Now
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.RegisterPlugin(ctx, &structs.Plugin{ID: "gce-pd", ControllerEndpoint: "unix:///c.sock"})
	must(err)
	v3 := testVolume("v3")
	v3.Namespace = "prod"
	_, err = b.RegisterVolumes(ctx, []*structs.Volume{testVolume("v1"), testVolume("v2"), v3})
	must(err)
	for _, n := range []string{"n1", "n2"} {
		_, err = b.RegisterNode(ctx, &structs.Node{ID: n, Status: structs.NodeReady})
		must(err)
	}
	_, err = b.UpsertAllocs(ctx, []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning},
		{ID: "a2", Namespace: "default", NodeID: "n2", ClientStatus: structs.AllocRunning},
	})
	must(err)
	for _, c := range [][3]string{{"v1", "a1", "n1"}, {"v2", "a2", "n2"}} {
		_, err = b.ClaimVolume(ctx, &structs.ClaimRequest{Namespace: "default", VolumeID: c[0], AllocID: c[1], NodeID: c[2], Mode: structs.ClaimWrite})
		must(err)
	}
	clk.Set(base)
	_, err = b.UpsertAllocs(ctx, []*structs.Alloc{{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete}})
	must(err)
	claim := func(state structs.ClaimState) *structs.Claim {
		return &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: state}
	}
	clk.Set(base.Add(time.Second))
	must(b.Checkpoint("default", "v1", claim(structs.ClaimNodeDetached)))
	clk.Set(base.Add(2 * time.Second))
	must(b.Checkpoint("default", "v1", claim(structs.ClaimReadyToFree)))
	must(b.Stick("default", "v2", &structs.Stuck{Reason: "controller detach keeps failing", AllocID: "a2", NodeID: "n2", Attempts: 5}))
	return b, base
}

func getJSON(t *testing.T, base, path string, out any, hdr ...string) int {
	t.Helper()
	resp, body := do(t, http.MethodGet, base+path, "", hdr...)
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal([]byte(body), out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, body)
		}
	}
	return resp.StatusCode
}

// TestStats: the counts, the stuck list and the release series of GET
// /v1/stats come from the store, and ?namespace= narrows them.
func TestStats(t *testing.T) {
	b, _ := uiState(t)
	ts := apitest.Serve(t, b)
	var s api.StatsResponse
	if code := getJSON(t, ts.URL, "/v1/stats", &s); code != 200 {
		t.Fatalf("GET /v1/stats: %d", code)
	}
	if s.Volumes != 3 || s.Claims != 1 || s.ClaimsByState[structs.ClaimTaken] != 1 || s.ClaimsByNode["n2"] != 1 {
		t.Fatalf("counts: volumes %d claims %d by state %v by node %v; want 3, 1, taken 1, n2 1", s.Volumes, s.Claims, s.ClaimsByState, s.ClaimsByNode)
	}
	if s.StuckCount != 1 || len(s.Stuck) != 1 || s.Stuck[0].ID != "v2" || s.Stuck[0].Stuck.Attempts != 5 {
		t.Fatalf("stuck: %d %+v, want v2 with 5 attempts", s.StuckCount, s.Stuck)
	}
	released := 0
	for _, m := range s.Releases {
		released += m.Count
	}
	if released != 1 {
		t.Fatalf("releases per minute sum to %d, want the one release: %+v", released, s.Releases)
	}
	// a1 completed at base, its claim was removed 2s later.
	var hist []string
	for _, l := range s.Latency {
		if l.Count > 0 {
			hist = append(hist, l.Label)
		}
	}
	if !slices.Equal(hist, []string{"< 5s"}) || strings.Contains(s.LatencyBasis, "first release event") {
		t.Fatalf("latency buckets with releases = %v (basis %q), want [< 5s] measured from the allocation", hist, s.LatencyBasis)
	}
	if s.Plugins["gce-pd"] != 3 || s.Namespaces["prod"] != 1 {
		t.Fatalf("by plugin %v, by namespace %v", s.Plugins, s.Namespaces)
	}

	var prod api.StatsResponse
	getJSON(t, ts.URL, "/v1/stats?namespace=prod", &prod)
	released = 0
	for _, m := range prod.Releases {
		released += m.Count
	}
	if prod.Volumes != 1 || prod.StuckCount != 0 || released != 0 {
		t.Fatalf("prod stats: %d volumes, %d stuck, %d releases; want 1, 0, 0", prod.Volumes, prod.StuckCount, released)
	}
	if code := getJSON(t, ts.URL, "/v1/stats?namespace=a%20b", nil); code != http.StatusBadRequest {
		t.Fatalf("bad namespace: %d, want 400", code)
	}
}

// TestVolumeListFilters: the UI's filters select before paging.
func TestVolumeListFilters(t *testing.T) {
	b, _ := uiState(t)
	ts := apitest.Serve(t, b)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"v1", "v2", "v3"}},
		{"?claim_state=taken", []string{"v2"}},
		{"?claim_state=node-detached", nil},
		{"?claim_state=unclaimed", []string{"v1", "v3"}},
		{"?stuck=true", []string{"v2"}},
		{"?stuck=false", []string{"v1", "v3"}},
		{"?search=3", []string{"v3"}},
		{"?search=v&namespace=default&stuck=false", []string{"v1"}},
		{"?search=v&per_page=1", []string{"v1"}},
	} {
		var vols []*structs.Volume
		if code := getJSON(t, ts.URL, "/v1/volumes"+tc.query, &vols); code != 200 {
			t.Fatalf("%s: %d", tc.query, code)
		}
		var got []string
		for _, v := range vols {
			got = append(got, v.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.query, got, tc.want)
		}
	}
	for q, field := range map[string]string{"?claim_state=freed": "claim_state", "?stuck=maybe": "stuck"} {
		resp, body := do(t, http.MethodGet, ts.URL+"/v1/volumes"+q, "")
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, field) {
			t.Errorf("%s: %d %s, want 400 naming %s", q, resp.StatusCode, body, field)
		}
	}
}

// TestSelfCapabilities: with ACL off everything is granted; with ACL on
// the answer is the token's own, a read-only token is told it cannot act,
// a bad token is refused, and the UI's assets need no token.
func TestSelfCapabilities(t *testing.T) {
	open := apitest.Serve(t, apitest.NewStoreBackend())
	var c api.CapabilitiesResponse
	getJSON(t, open.URL, "/v1/acl/token/self/capabilities", &c)
	if c.ACLEnabled || !c.Management || !slices.Contains(c.InNamespace, acl.NamespaceForceDeregister) {
		t.Fatalf("ACL off: %+v, want everything granted", c)
	}

	f := newACLFixture(t)
	f.policy(t, "readonly", `namespace "default" { policy = "read" }
node { policy = "read" }
modules { policy = "read" }
events { policy = "read" }`)
	ro, roAccessor := f.token(t, "", "readonly")
	var got api.CapabilitiesResponse
	if code := getJSON(t, f.ts.URL, "/v1/acl/token/self/capabilities", &got, api.TokenHeader, ro); code != 200 {
		t.Fatalf("read-only token: %d", code)
	}
	if !got.ACLEnabled || got.Management || got.Accessor != roAccessor || got.Namespace != "default" {
		t.Fatalf("read-only identity: %+v", got)
	}
	if !slices.Contains(got.InNamespace, acl.NamespaceRead) || slices.Contains(got.InNamespace, acl.NamespaceForceDeregister) ||
		slices.Contains(got.InNamespace, acl.NamespaceDetach) || len(got.Everywhere) != 0 {
		t.Fatalf("read-only namespace capabilities: in %v, everywhere %v", got.InNamespace, got.Everywhere)
	}
	if !slices.Contains(got.Global, acl.ModulesRead) || slices.Contains(got.Global, acl.ModulesReload) || slices.Contains(got.Global, acl.NodeWrite) {
		t.Fatalf("read-only global capabilities: %v", got.Global)
	}
	var prod api.CapabilitiesResponse
	getJSON(t, f.ts.URL, "/v1/acl/token/self/capabilities?namespace=prod", &prod, api.TokenHeader, ro)
	if len(prod.InNamespace) != 0 {
		t.Fatalf("prod capabilities of a default-only token: %v", prod.InNamespace)
	}
	var mgmt api.CapabilitiesResponse
	getJSON(t, f.ts.URL, "/v1/acl/token/self/capabilities", &mgmt, api.TokenHeader, f.mgmt)
	if !mgmt.Management || !slices.Contains(mgmt.Everywhere, acl.NamespaceForceDeregister) {
		t.Fatalf("management: %+v", mgmt)
	}
	if code := getJSON(t, f.ts.URL, "/v1/acl/token/self/capabilities", nil, api.TokenHeader, "not-a-token"); code != http.StatusForbidden {
		t.Fatalf("bad token: %d, want 403", code)
	}
	// The assets are public; the data is not.
	if resp, body := do(t, http.MethodGet, f.ts.URL+"/ui/volumes", ""); resp.StatusCode != 200 || !strings.Contains(body, "app.js") {
		t.Fatalf("GET /ui/volumes without a token: %d", resp.StatusCode)
	}
	if code := getJSON(t, f.ts.URL, "/v1/stats", nil); code != http.StatusForbidden {
		t.Fatalf("GET /v1/stats anonymously with ACL on: %d, want 403", code)
	}
	if code := getJSON(t, f.ts.URL, "/v1/stats", nil, api.TokenHeader, ro); code != http.StatusForbidden {
		t.Fatalf("GET /v1/stats across namespaces with a default-only token: %d, want 403", code)
	}
	if code := getJSON(t, f.ts.URL, "/v1/stats?namespace=default", nil, api.TokenHeader, ro); code != 200 {
		t.Fatalf("GET /v1/stats?namespace=default with namespace read: %d, want 200", code)
	}
	// The read-only token cannot act, whatever the UI shows.
	resp, _ := do(t, http.MethodDelete, f.ts.URL+"/v1/volume/v1?force=true", "", api.TokenHeader, ro)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("force deregister with the read-only token: %d, want 403", resp.StatusCode)
	}
}
