package extism

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

// All three judge the same volume with 8 claims; every Wasm call runs with
// a 1 s timeout, which in both hosts turns on wazero's close-on-context-done
// (the cost that matters: wazero then checks for close at every loop
// header). 1 s rather than 100 ms so a guest GC cycle on a loaded 2-core
// machine cannot fail a benchmark iteration.
const timeoutMs = 1000

var (
	repoRoot  string
	buildDir  string
	cacheDir  string
	guestWasm []byte // Extism PDK guest
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	wd, _ := os.Getwd()
	repoRoot = filepath.Join(wd, "..", "..")
	var err error
	if buildDir, err = os.MkdirTemp("", "volhost-extism-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(buildDir)
	if cacheDir = os.Getenv("VOLHOST_WAZERO_CACHE"); cacheDir == "" {
		base, _ := os.UserCacheDir()
		cacheDir = filepath.Join(base, "volhost", "wazero-v1.12.0")
	}
	steps := []struct{ dir, pkg, out string }{
		{wd, "./guest", "extism-guest.wasm"},
		{repoRoot, "./examples/plugins/default-policy", "default-policy.wasm"},
	}
	for _, s := range steps {
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", filepath.Join(buildDir, s.out), s.pkg)
		cmd.Dir = s.dir
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", s.pkg, err, out)
			return 1
		}
	}
	if guestWasm, err = os.ReadFile(filepath.Join(buildDir, "extism-guest.wasm")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// volumeRequest is a volume with 8 claims in the states the default policy
// distinguishes (the same shape as plugins' benchmark).
func volumeRequest() *abi.PolicyRequest { return volumeRequestN(8) }

// volumeRequestN is a volume with n claims.
func volumeRequestN(n int) *abi.PolicyRequest {
	statuses := []string{"complete", "running", "failed", "lost", "pending", "gone"}
	nodes := []string{"ready", "down", "gone"}
	req := &abi.PolicyRequest{
		NowUnixMs: 1_750_000_000_000,
		Volume:    abi.VolumeView{Namespace: "default", ID: "web-data", PluginID: "gcepd", AccessMode: "single-node-writer", AttachmentMode: "file-system"},
	}
	for i := 0; i < n; i++ {
		alloc := fmt.Sprintf("alloc-%d", i)
		req.Claims = append(req.Claims, abi.ClaimView{AllocID: alloc, NodeID: fmt.Sprintf("node-%d", i%3), Mode: "write", State: "taken", Attempts: uint32(i % 2)})
		req.Allocs = append(req.Allocs, abi.AllocView{ID: alloc, ClientStatus: statuses[i%len(statuses)], TerminalAgeMs: int64(i) * 1000})
	}
	for i := 0; i < 3 && i < n; i++ {
		req.Nodes = append(req.Nodes, abi.NodeView{ID: fmt.Sprintf("node-%d", i), Status: nodes[i], LastSeenAgeMs: int64(i) * 60_000})
	}
	return req
}

// (a) native Go.
func BenchmarkNative(b *testing.B) {
	req := volumeRequest()
	b.ReportAllocs()
	for b.Loop() {
		if len(defaultpolicy.Decide(req).Decisions) != 8 {
			b.Fatal("wrong answer")
		}
	}
}

// (b) volhost: plugins.Manager, default-policy Go guest, call_timeout 1s.
func BenchmarkVolhost(b *testing.B) { benchVolhost(b, volumeRequest()) }

// BenchmarkVolhostEmpty is (b) on a volume without claims: the fixed cost
// of a call (host overhead, guest entry, codec framing).
func BenchmarkVolhostEmpty(b *testing.B) { benchVolhost(b, volumeRequestN(0)) }

func benchVolhost(b *testing.B, req *abi.PolicyRequest) {
	m := newManager(b, filepath.Join(buildDir, "default-policy.wasm"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := m.DecideRelease(ctx, "policy", req)
		if err != nil || len(resp.Decisions) != len(req.Claims) {
			b.Fatalf("%v %v", resp, err)
		}
	}
}

func newExtismPlugin(b *testing.B) *extism.Plugin {
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cache.Close(ctx) })
	manifest := extism.Manifest{
		Wasm:    []extism.Wasm{extism.WasmData{Data: guestWasm, Name: "main"}},
		Timeout: timeoutMs,
		Memory:  &extism.ManifestMemory{MaxPages: 256},
	}
	p, err := extism.NewPlugin(ctx, manifest, extism.PluginConfig{
		EnableWasi:    true,
		RuntimeConfig: wazero.NewRuntimeConfig().WithCompilationCache(cache),
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close(ctx) })
	return p
}

// (c) Extism Go SDK, Go PDK guest, same codec and logic, timeout_ms 1000.
func BenchmarkExtism(b *testing.B) { benchExtism(b, volumeRequest()) }

// BenchmarkExtismEmpty is (c) on a volume without claims.
func BenchmarkExtismEmpty(b *testing.B) { benchExtism(b, volumeRequestN(0)) }

func benchExtism(b *testing.B, req *abi.PolicyRequest) {
	p := newExtismPlugin(b)
	in := req.MarshalAppend(nil)
	b.ReportAllocs()
	for b.Loop() {
		rc, out, err := p.Call("decide", in)
		if err != nil || rc != 0 {
			b.Fatalf("rc %d: %v", rc, err)
		}
		var resp abi.PolicyResponse
		if err := resp.Unmarshal(out); err != nil || len(resp.Decisions) != len(req.Claims) {
			b.Fatalf("%v %v", resp, err)
		}
	}
}

// (c') Extism with JSON, the PDK's idiomatic encoding (for reference).
func BenchmarkExtismJSON(b *testing.B) {
	p := newExtismPlugin(b)
	in, err := json.Marshal(volumeRequest())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rc, out, err := p.Call("decide_json", in)
		if err != nil || rc != 0 {
			b.Fatalf("rc %d: %v", rc, err)
		}
		var resp abi.PolicyResponse
		if err := json.Unmarshal(out, &resp); err != nil || len(resp.Decisions) != 8 {
			b.Fatalf("%v %v", resp, err)
		}
	}
}

// TestSameDecisions checks that all three paths agree, so the benchmarks
// compare the same work.
func TestSameDecisions(t *testing.T) {
	req := volumeRequest()
	want := defaultpolicy.Decide(req)
	ctx := context.Background()
	cache, _ := wazero.NewCompilationCacheWithDir(cacheDir)
	defer cache.Close(ctx)
	p, err := extism.NewPlugin(ctx, extism.Manifest{
		Wasm: []extism.Wasm{extism.WasmData{Data: guestWasm}}, Timeout: timeoutMs,
	}, extism.PluginConfig{EnableWasi: true, RuntimeConfig: wazero.NewRuntimeConfig().WithCompilationCache(cache)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	_, out, err := p.Call("decide", req.MarshalAppend(nil))
	if err != nil {
		t.Fatal(err)
	}
	var got abi.PolicyResponse
	if err := got.Unmarshal(out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Decisions) != fmt.Sprint(want.Decisions) {
		t.Fatalf("extism decisions %v, native %v", got.Decisions, want.Decisions)
	}
}
