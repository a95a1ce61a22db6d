package plugins

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

const policyManifest = `limits {
  memory_pages = 256
  call_timeout = "2s"
  pool_size    = 2
}`

// volumeRequest builds a policy request for a volume with n claims whose
// allocations and nodes cycle through the states the default policy
// distinguishes.
func volumeRequest(n int) *abi.PolicyRequest {
	statuses := []string{"complete", "running", "failed", "lost", "pending", "gone"}
	nodes := []string{"ready", "down", "gone"}
	req := &abi.PolicyRequest{
		NowUnixMs: 1_750_000_000_000,
		Volume:    abi.VolumeView{Namespace: "default", ID: "web-data", PluginID: "gcepd", AccessMode: "single-node-writer", AttachmentMode: "file-system"},
	}
	for i := 0; i < n; i++ {
		alloc := fmt.Sprintf("alloc-%d", i)
		node := fmt.Sprintf("node-%d", i%3)
		req.Claims = append(req.Claims, abi.ClaimView{AllocID: alloc, NodeID: node, Mode: "write", State: "taken", Attempts: uint32(i % 2)})
		req.Allocs = append(req.Allocs, abi.AllocView{ID: alloc, ClientStatus: statuses[i%len(statuses)], TerminalAgeMs: int64(i) * 1000})
	}
	for i := 0; i < 3 && i < n; i++ {
		req.Nodes = append(req.Nodes, abi.NodeView{ID: fmt.Sprintf("node-%d", i), Status: nodes[i], LastSeenAgeMs: int64(i) * 60_000})
	}
	return req
}

func TestDefaultPolicyMatchesNative(t *testing.T) {
	wasm := exampleWasm(t, "default-policy")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "default-policy", wasm, manifest("release-policy", "default = true\n"+policyManifest))
	}, nil)
	st, ok := e.m.StatusOf("default-policy")
	if !ok || st.State != StateServing {
		t.Fatalf("status %+v, want serving", st)
	}
	if st.Kind != "release-policy" || st.Version != "1.0.0" || len(st.SHA256) != 64 || st.Generation != 1 || st.PoolSize != 2 || st.PoolIdle != 1 {
		t.Errorf("status %+v", st)
	}
	ctx := context.Background()
	for _, n := range []int{0, 1, 2, 8, 33} {
		t.Run(fmt.Sprint(n, " claims"), func(t *testing.T) {
			req := volumeRequest(n)
			got, err := e.m.DecideRelease(ctx, "default-policy", req)
			if err != nil {
				t.Fatalf("DecideRelease: %v", err)
			}
			want := defaultpolicy.Decide(req)
			if len(got.Decisions) != len(want.Decisions) || (len(want.Decisions) > 0 && !reflect.DeepEqual(got.Decisions, want.Decisions)) {
				t.Fatalf("wasm decisions\n%+v\nnative\n%+v", got.Decisions, want.Decisions)
			}
		})
	}
	if st, _ := e.m.StatusOf("default-policy"); st.Calls != 5 || st.P50 <= 0 || st.MemoryPages == 0 {
		t.Errorf("after 5 calls: %+v", st)
	}
	// Wrong kind and unknown module are typed faults, not panics.
	_, err := e.m.AdaptRequest(ctx, "default-policy", &abi.AdapterRequest{})
	assertFault(t, err, FaultNotLoaded)
	_, err = e.m.DecideRelease(ctx, "nope", volumeRequest(1))
	assertFault(t, err, FaultNotLoaded)
}

func assertFault(t testing.TB, err error, want FaultKind) *FaultError {
	t.Helper()
	var fe *FaultError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T), want a *FaultError of kind %s", err, err, want)
	}
	if fe.Kind != want {
		t.Fatalf("fault kind %s, want %s (error: %v)", fe.Kind, want, err)
	}
	if fe.FaultKind() != string(want) || fe.ModuleName() != fe.Module {
		t.Fatalf("ModuleFault methods disagree with fields: %+v", fe)
	}
	return fe
}

func TestMatch(t *testing.T) {
	wasm := exampleWasm(t, "default-policy")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "fallback", wasm, manifest("release-policy", "default = true"))
		writeModule(t, dir, "by-plugin", wasm, manifest("release-policy", `plugin_ids = ["gce*"]`))
		writeModule(t, dir, "by-volume", wasm, manifest("release-policy", `volumes = ["default/web-*"]`))
		writeModule(t, dir, "by-volume-b", wasm, manifest("release-policy", `volumes = ["*/web-*"]`))
	}, nil)
	tests := []struct {
		kind   abi.Kind
		target Target
		want   string
		ok     bool
	}{
		{abi.KindReleasePolicy, Target{"default", "web-1", "gcepd"}, "by-volume", true},
		{abi.KindReleasePolicy, Target{"prod", "web-1", "ebs"}, "by-volume-b", true},
		{abi.KindReleasePolicy, Target{"prod", "db", "gcepd"}, "by-plugin", true},
		{abi.KindReleasePolicy, Target{"prod", "db", "ebs"}, "fallback", true},
		{abi.KindCSIAdapter, Target{"default", "web-1", "gcepd"}, "", false},
	}
	for _, tt := range tests {
		name, ok := e.m.Match(tt.kind, tt.target)
		if name != tt.want || ok != tt.ok {
			t.Errorf("Match(%s, %+v) = %q, %v; want %q, %v", tt.kind, tt.target, name, ok, tt.want, tt.ok)
		}
	}
}

func TestRefusedAtLoad(t *testing.T) {
	good := exampleWasm(t, "default-policy")
	tests := []struct {
		name    string
		wasm    []byte
		hcl     []byte
		wantErr string
	}{
		{"garbage", []byte("\x00asm\x01\x00\x00\x00garbage"), manifest("release-policy", ""), "is not a valid module"},
		{"not wasm", []byte("hello"), manifest("release-policy", ""), "is not a valid module"},
		{"sha pin", good, manifest("release-policy", `sha256 = "`+strings.Repeat("0", 64)+`"`), "manifest pins"},
		{"wrong kind", good, manifest("csi-adapter", ""), "self-test"},
		{"config refused by module", good, manifest("release-policy", `config = { colour = "blue" }`), "configure"},
		{"unknown manifest attribute", good, manifest("release-policy", `colour = "blue"`), "colour"},
		{"no manifest", good, nil, "has no manifest"},
		{"memory cap below initial", good, manifest("release-policy", "limits {\n memory_pages = 4\n}"), "over limit of 4 pages"},
	}
	e := newEnv(t, func(dir string) {
		for _, tt := range tests {
			writeModule(t, dir, strings.ReplaceAll(tt.name, " ", "-"), tt.wasm, tt.hcl)
		}
	}, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := strings.ReplaceAll(tt.name, " ", "-")
			st, ok := e.m.StatusOf(name)
			if !ok {
				t.Fatalf("no status for %s", name)
			}
			if st.State != StateRefused || !strings.Contains(st.Refusal, tt.wantErr) {
				t.Fatalf("state %s refusal %q, want refused mentioning %q", st.State, st.Refusal, tt.wantErr)
			}
			_, err := e.m.DecideRelease(context.Background(), name, volumeRequest(1))
			assertFault(t, err, FaultNotLoaded)
		})
	}
	if got := len(e.eventsOf(EventRefused)); got != len(tests) {
		t.Errorf("%d refused events, want %d", got, len(tests))
	}
	// Refused candidates leave no runtime behind.
	if n := e.m.runtimes.Load(); n != 0 {
		t.Errorf("%d runtimes open, want 0", n)
	}
	_ = time.Second
}
