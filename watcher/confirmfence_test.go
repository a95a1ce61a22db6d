package watcher

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
)

// fenceAdapter is an ABI 1.1 adapter whose confirm_fence a test scripts.
type fenceAdapter struct {
	SpecAdapter
	confirm func(ctx context.Context, req *abi.FenceRequest) (*abi.FenceResponse, error)
	off     bool // ConfirmsFence false: a 1.0 module

	mu   sync.Mutex
	reqs []*abi.FenceRequest
}

func (a *fenceAdapter) ModuleName() string    { return "fence-test" }
func (a *fenceAdapter) ModuleVersion() string { return "1.1.0" }
func (a *fenceAdapter) ConfirmsFence() bool   { return !a.off }

func (a *fenceAdapter) ConfirmFence(ctx context.Context, req *abi.FenceRequest) (*abi.FenceResponse, error) {
	a.mu.Lock()
	a.reqs = append(a.reqs, req)
	a.mu.Unlock()
	return a.confirm(ctx, req)
}

func (a *fenceAdapter) asked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reqs)
}

// FenceNode makes the fake store a NodeFencer, refusing what the store's
// validateModuleFence refuses (host/state tests that rule itself).
func (s *fakeStore) FenceNode(_ context.Context, req *structs.NodeFenceRequest) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fences = append(s.fences, req)
	n := s.nodes[req.NodeID]
	switch {
	case n == nil:
		return 0, structs.ErrNotFound
	case n.Fence != nil || !n.HeartbeatLost || n.Status == structs.NodeReady || !n.StatusSince.Equal(req.LostSince):
		return 0, structs.Conflict("node %q is not lost as the module was told", req.NodeID)
	}
	n = n.Copy()
	f := *req.Fence
	n.Fence = &f
	s.nodes[n.ID] = n
	return 1, nil
}

func (s *fakeStore) fenceCalls() []*structs.NodeFenceRequest {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*structs.NodeFenceRequest(nil), s.fences...)
}

func newFenceFixture(t *testing.T, fa *fenceAdapter) (*fixture, *forcedMetrics) {
	t.Helper()
	f := newFixture(t, Config{}, testModules{adapter: fa})
	fm := &forcedMetrics{countingMetrics: f.metrics, forced: map[string]int{}}
	f.w.metrics = fm
	f.w.deps.Agents = agents{}
	f.w.term = 4
	f.store.putNode(agentNode(structs.NodeDown, true, nil))
	return f, fm
}

func answer(resp abi.FenceResponse) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
	return func(_ context.Context, req *abi.FenceRequest) (*abi.FenceResponse, error) {
		r := resp
		if r.NodeID == "" {
			r.NodeID = req.Node.ID
		}
		return &r, nil
	}
}

// ABI 1.1's volhost_confirm_fence: an adapter module confirms the fence of a node that
// only missed heartbeats; the fence is committed (by the pass's term,
// naming the module) before the claim skips its node steps, with the
// module's reason on the claim and the module-fence metric label.
func TestModuleConfirmsFence(t *testing.T) {
	fa := &fenceAdapter{confirm: answer(abi.FenceResponse{Confirmed: true, Reason: "instance i-1 is TERMINATED"})}
	f, fm := newFenceFixture(t, fa)
	f.store.putAlloc("a1", testNode, structs.AllocFailed)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.clock.Advance(90 * time.Second)

	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	reqs := fa.reqs
	if len(reqs) != 1 {
		t.Fatalf("module asked %d times, want 1", len(reqs))
	}
	req := reqs[0]
	if req.Node.ID != testNode || req.Node.Status != "down" || req.Node.ExternalID != "ext-"+testNode || req.LostAgeMs != 90_000 ||
		req.StatusReason != "no heartbeat for 30s" || req.Volume.ID != "v1" || len(req.Claims) != 1 || req.Claims[0].AllocID != "a1" {
		t.Fatalf("fence request = %+v", req)
	}
	fences := f.store.fenceCalls()
	if len(fences) != 1 {
		t.Fatalf("%d fence writes, want 1", len(fences))
	}
	if w := fences[0]; w.Term != 4 || !w.LostSince.Equal(t0) || w.Fence.Source != "module:fence-test@1.1.0" || w.Fence.Reason != "instance i-1 is TERMINATED" {
		t.Fatalf("fence write = %+v %+v", w, w.Fence)
	}
	if got := f.csi.methods(); strings.Join(got, ",") != mCtlUnpublish {
		t.Fatalf("calls = %v, want only %s", got, mCtlUnpublish)
	}
	if c := f.store.claim(ref("v1"), "a1"); c != nil {
		t.Fatalf("claim not released: %+v", c)
	}
	cp := f.store.checkpointCalls()[0].Claim
	if cp.State != structs.ClaimNodeDetached || !cp.SkipNodeStep || cp.FenceReason != "module:fence-test@1.1.0: instance i-1 is TERMINATED" {
		t.Fatalf("node-detached checkpoint: state %s skip %v fence reason %q", cp.State, cp.SkipNodeStep, cp.FenceReason)
	}
	fm.mu.Lock()
	defer fm.mu.Unlock()
	if fm.forced["module"] != 1 || fm.forced["operator"] != 0 {
		t.Fatalf("forced detaches = %v, want module 1", fm.forced)
	}
}

// Anything but a valid confirmation of the node as the module was told
// leaves the claim held by the host, commits nothing, and says why in the
// hold; the module is asked again only after its retry_after or the
// host's backoff, never on every pass.
func TestModuleFenceRefusals(t *testing.T) {
	ready := func(f *fixture) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
		return func(_ context.Context, req *abi.FenceRequest) (*abi.FenceResponse, error) {
			f.store.putNode(agentNode(structs.NodeReady, false, nil)) // it heartbeats while the module answers
			return &abi.FenceResponse{NodeID: req.Node.ID, Confirmed: true, Reason: "terminated (wrongly)"}, nil
		}
	}
	for _, tc := range []struct {
		name     string
		confirm  func(f *fixture) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error)
		off      bool
		asked    int
		note     string        // in the hold's reason
		again    time.Duration // the next ask is due after this
		attempts int           // fence writes tried
		onePass  bool          // the node is ready after the first pass
	}{
		{name: "says no", confirm: func(*fixture) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
			return answer(abi.FenceResponse{Reason: "instance i-1 is RUNNING", RetryAfterMs: 60_000})
		}, asked: 1, note: "does not confirm it is off: instance i-1 is RUNNING", again: time.Minute},
		{name: "faults", confirm: func(*fixture) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
			return func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) { return nil, fakeFault{} }
		}, asked: 1, note: "(trap fault), so it is not fenced", again: time.Second},
		{name: "another node", confirm: func(*fixture) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
			return answer(abi.FenceResponse{NodeID: "n2", Confirmed: true, Reason: "terminated"})
		}, asked: 1, note: "(bad-output fault)", again: time.Second},
		{name: "no reason", confirm: func(*fixture) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
			return answer(abi.FenceResponse{Confirmed: true})
		}, asked: 1, note: "(bad-output fault)", again: time.Second},
		{name: "guest error", confirm: func(*fixture) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
			return answer(abi.FenceResponse{Confirmed: true, Reason: "x", Error: "inventory unreachable"})
		}, asked: 1, note: "(bad-output fault)", again: time.Second},
		{name: "lies about a node that heartbeats", confirm: ready, asked: 1, onePass: true,
			note: "no longer lost as it was told: refused"},
		{name: "ABI 1.0 adapter", off: true, confirm: func(*fixture) func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
			return answer(abi.FenceResponse{Confirmed: true, Reason: "x"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fa := &fenceAdapter{off: tc.off}
			f, fm := newFenceFixture(t, fa)
			fa.confirm = tc.confirm(f)
			f.store.putAlloc("a1", testNode, structs.AllocFailed)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
			passes := 2 // the second pass, at the same time, asks nobody
			if tc.onePass {
				passes = 1
			}
			for range passes {
				if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
					t.Fatal(err)
				}
			}
			if fa.asked() != tc.asked {
				t.Fatalf("asked %d times, want %d", fa.asked(), tc.asked)
			}
			if n := len(f.store.fenceCalls()); n != tc.attempts {
				t.Fatalf("%d fence writes, want %d", n, tc.attempts)
			}
			if n, _ := f.store.Node(testNode); n.Fence != nil {
				t.Fatalf("node fenced: %+v", n.Fence)
			}
			if got := f.csi.methods(); len(got) != 0 {
				t.Fatalf("CSI calls %v on a node nobody fenced", got)
			}
			c := f.store.claim(ref("v1"), "a1")
			if c == nil || c.State != structs.ClaimTaken || c.Hold == nil || c.Hold.Module != HostHolder ||
				!strings.Contains(c.Hold.Reason, "volhost node fence") || !strings.Contains(c.Hold.Reason, tc.note) {
				t.Fatalf("claim = %+v hold %+v, want the host's hold noting %q", c, c.Hold, tc.note)
			}
			fm.mu.Lock()
			forced := len(fm.forced)
			fm.mu.Unlock()
			if forced != 0 {
				t.Fatalf("forced detaches %v", fm.forced)
			}
			if tc.asked == 0 || tc.onePass {
				return
			}
			f.clock.Advance(tc.again - time.Millisecond)
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			if fa.asked() != tc.asked {
				t.Fatalf("asked again before %s", tc.again)
			}
			f.clock.Advance(time.Millisecond)
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			if fa.asked() != tc.asked+1 {
				t.Fatalf("not asked again after %s (asked %d)", tc.again, fa.asked())
			}
			if r := fa.reqs[len(fa.reqs)-1]; r.Attempts != 1 {
				t.Fatalf("second ask carries attempts %d, want 1", r.Attempts)
			}
		})
	}
}

// One question per node at a time, whichever volumes wait on it: a pass
// that finds another asking holds, and once the fence is committed every
// volume on the node releases without asking again.
func TestModuleFenceOneAskPerNode(t *testing.T) {
	entered, answerNow := make(chan struct{}), make(chan struct{})
	fa := &fenceAdapter{confirm: func(ctx context.Context, req *abi.FenceRequest) (*abi.FenceResponse, error) {
		close(entered)
		<-answerNow
		return &abi.FenceResponse{NodeID: req.Node.ID, Confirmed: true, Reason: "instance terminated"}, nil
	}}
	f, _ := newFenceFixture(t, fa)
	f.store.putAlloc("a1", testNode, structs.AllocFailed)
	f.store.putAlloc("a2", testNode, structs.AllocFailed)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.store.putVolume(newVolume("v2", newClaim("a2", testNode, structs.ClaimTaken)))

	done := make(chan error, 1)
	go func() {
		_, err := f.w.assess(context.Background(), ref("v1"))
		done <- err
	}()
	<-entered
	if _, err := f.w.assess(context.Background(), ref("v2")); err != nil {
		t.Fatal(err)
	}
	if c := f.store.claim(ref("v2"), "a2"); c == nil || c.Hold == nil || !strings.Contains(c.Hold.Reason, "its answer is awaited") {
		t.Fatalf("v2 claim while the module is asked: %+v", c)
	}
	close(answerNow)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := f.w.assess(context.Background(), ref("v2")); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1", "v2"} {
		if c := f.store.claim(ref(v), "a"+v[1:]); c != nil {
			t.Fatalf("%s claim not released: %s", v, c.State)
		}
	}
	if fa.asked() != 1 || len(f.store.fenceCalls()) != 1 {
		t.Fatalf("asked %d times, %d fence writes; want 1 and 1", fa.asked(), len(f.store.fenceCalls()))
	}
}

// A step-down while the module is asked commits nothing: the pass ends
// with its context's error, and the next leader asks again.
func TestModuleFenceStepDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fa := &fenceAdapter{confirm: func(context.Context, *abi.FenceRequest) (*abi.FenceResponse, error) {
		cancel()
		return nil, context.Canceled
	}}
	f, _ := newFenceFixture(t, fa)
	f.store.putAlloc("a1", testNode, structs.AllocFailed)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	if _, err := f.w.assess(ctx, ref("v1")); err == nil {
		t.Fatal("pass survived its cancelled context")
	}
	if len(f.store.fenceCalls()) != 0 || len(f.csi.methods()) != 0 {
		t.Fatal("a cancelled ask wrote a fence or called CSI")
	}
	fa.confirm = answer(abi.FenceResponse{Reason: "running"})
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if fa.asked() != 2 {
		t.Fatalf("asked %d times, want 2: an unanswered ask does not count", fa.asked())
	}
}

// The whole ABI 1.1 path with a real module (plugins/pluginstest/modules/
// fence-adapter, through *plugins.Manager): a lost node whose instance
// the module's config lists is fenced by the module and released; one it
// does not list stays held; a 1.0 adapter (gcepd-adapter) is never asked.
func TestWasmModuleConfirmsFence(t *testing.T) {
	adapter := func(plugin, config string) string {
		return fmt.Sprintf(`kind = "csi-adapter"
version = "1.1.0"
plugin_ids = [%q]
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 1
}
config = { %s }
`, plugin, config)
	}
	clock := clockwork.NewFakeClockAt(t0)
	m := newWasmManager(t, clock,
		moduleFile{name: "fence-adapter", example: "fence-adapter", manifest: adapter(testPlugin, `terminated = "i-dead"`)})
	for _, tc := range []struct {
		name     string
		instance string
		fenced   bool
	}{
		{"listed instance", "i-dead", true},
		{"unlisted instance", "i-alive", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, WasmModules(m, nil))
			fm := &forcedMetrics{countingMetrics: f.metrics, forced: map[string]int{}}
			f.w.metrics, f.w.deps.Agents = fm, agents{}
			n := agentNode(structs.NodeDown, true, nil)
			n.Meta = map[string]string{"instance": tc.instance}
			f.store.putNode(n)
			f.store.putAlloc("a1", testNode, structs.AllocFailed)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			node, _ := f.store.Node(testNode)
			c := f.store.claim(ref("v1"), "a1")
			if !tc.fenced {
				if node.Fence != nil || c == nil || c.Hold == nil || !strings.Contains(c.Hold.Reason, "instance not listed as terminated") {
					t.Fatalf("fence %+v, claim %+v: want held with the module's answer", node.Fence, c)
				}
				return
			}
			if node.Fence == nil || node.Fence.Source != "module:fence-adapter@1.1.0" || !strings.Contains(node.Fence.Reason, "i-dead") {
				t.Fatalf("fence = %+v", node.Fence)
			}
			if c != nil {
				t.Fatalf("claim not released: %s", c.State)
			}
			fm.mu.Lock()
			defer fm.mu.Unlock()
			if fm.forced["module"] != 1 {
				t.Fatalf("forced detaches = %v", fm.forced)
			}
		})
	}
}
