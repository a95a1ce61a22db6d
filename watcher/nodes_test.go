package watcher

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// forcedMetrics counts forced detaches by source.
type forcedMetrics struct {
	*countingMetrics
	mu     sync.Mutex
	forced map[string]int
}

func (m *forcedMetrics) ForcedDetach(source string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forced[source]++
}

// agents is an attach.NodeAgents over a map of connected agents.
type agents map[string]attach.NodeSteps

func (a agents) NodeAgent(id string) (attach.NodeSteps, bool) {
	c, ok := a[id]
	return c, ok
}

func newAgentFixture(t *testing.T, ag attach.NodeAgents) (*fixture, *forcedMetrics) {
	t.Helper()
	f := newFixture(t, Config{}, nil)
	fm := &forcedMetrics{countingMetrics: f.metrics, forced: map[string]int{}}
	f.w.metrics = fm
	f.w.deps.Agents = ag
	return f, fm
}

func agentNode(status structs.NodeStatus, lost bool, fence *structs.NodeFence) *structs.Node {
	n := readyNode(testNode)
	n.Agent, n.Status, n.HeartbeatLost, n.Fence = true, status, lost, fence
	n.StatusSince, n.StatusReason = t0, "no heartbeat for 30s"
	return n
}

// The node agent's safety rule: a node that only missed heartbeats keeps
// its claims waiting (visibly, held by the host) whatever the policy says;
// a fence lets them skip the node steps, with the reason on the claim and
// in the metric; a node the operator marked down keeps today's skip.
func TestLostNodeWaitsForFence(t *testing.T) {
	fence := &structs.NodeFence{Reason: "powered off in console", Source: "operator", Time: t0}
	ctlOnly := []string{mCtlUnpublish}
	for _, tc := range []struct {
		name       string
		node       *structs.Node
		wantCalls  []string
		released   bool
		heldByHost bool
		forced     int
		fenceNote  string
	}{
		{name: "heartbeat lost, down", node: agentNode(structs.NodeDown, true, nil), heldByHost: true},
		{name: "heartbeat lost, gone", node: agentNode(structs.NodeGone, true, nil), heldByHost: true},
		{name: "heartbeat lost, fenced", node: agentNode(structs.NodeDown, true, fence), wantCalls: ctlOnly, released: true,
			forced: 1, fenceNote: "operator: powered off in console"},
		{name: "fenced, heartbeating", node: agentNode(structs.NodeReady, false, fence), wantCalls: ctlOnly, released: true,
			forced: 1, fenceNote: "operator: powered off in console"},
		{name: "operator set down (direct mode)", node: func() *structs.Node {
			n := readyNode(testNode)
			n.Status = structs.NodeDown
			return n
		}(), wantCalls: ctlOnly, released: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, fm := newAgentFixture(t, agents{})
			f.store.putNode(tc.node)
			f.store.putAlloc("a1", testNode, structs.AllocFailed)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			if got := f.csi.methods(); strings.Join(got, ",") != strings.Join(tc.wantCalls, ",") {
				t.Fatalf("calls = %v, want %v", got, tc.wantCalls)
			}
			c := f.store.claim(ref("v1"), "a1")
			if tc.released != (c == nil) {
				t.Fatalf("claim after the pass = %+v, released want %v", c, tc.released)
			}
			if tc.heldByHost {
				if c.Hold == nil || c.Hold.Module != HostHolder || !strings.Contains(c.Hold.Reason, "volhost node fence") {
					t.Fatalf("hold = %+v, want the host's hold naming `volhost node fence`", c.Hold)
				}
				if c.State != structs.ClaimTaken {
					t.Fatalf("state = %s, want taken", c.State)
				}
			}
			fm.mu.Lock()
			forced := fm.forced["operator"]
			fm.mu.Unlock()
			if forced != tc.forced {
				t.Fatalf("forced detaches = %d, want %d", forced, tc.forced)
			}
			if tc.fenceNote != "" {
				cps := f.store.checkpointCalls()
				if got := cps[0].Claim; got.FenceReason != tc.fenceNote || !got.SkipNodeStep {
					t.Fatalf("node-detached checkpoint: fence reason %q skip %v, want %q", got.FenceReason, got.SkipNodeStep, tc.fenceNote)
				}
			}
		})
	}
}

// A node registered through its agent is driven through it, never by
// dialling its (node-local) endpoint; without a connected agent the step
// fails with a precondition error naming the agent.
func TestNodeStepsGoThroughTheAgent(t *testing.T) {
	agent := newFakeCSI()
	for _, tc := range []struct {
		name      string
		agents    attach.NodeAgents
		viaAgent  int
		direct    int
		wantError string
	}{
		{name: "connected", agents: agents{testNode: agent}, viaAgent: 2},
		{name: "not connected", agents: agents{}, wantError: "node agent of node \"n1\" is not connected"},
		{name: "no agents at all", agents: nil, wantError: "not connected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent.mu.Lock()
			agent.calls = nil
			agent.mu.Unlock()
			f, _ := newAgentFixture(t, tc.agents)
			f.store.putNode(agentNode(structs.NodeReady, false, nil))
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			if n := len(agent.methods()); n != tc.viaAgent {
				t.Fatalf("calls through the agent = %v, want %d", agent.methods(), tc.viaAgent)
			}
			if n := f.csi.count(mNodeUnpublish) + f.csi.count(mNodeUnstage); n != tc.direct {
				t.Fatalf("node calls dialled directly = %d, want %d", n, tc.direct)
			}
			c := f.store.claim(ref("v1"), "a1")
			if tc.wantError == "" {
				if c != nil {
					t.Fatalf("claim not released: %+v", c)
				}
				return
			}
			if c == nil || c.LastError == nil || !strings.Contains(c.LastError.Message, tc.wantError) || c.LastError.Kind != structs.ErrorPrecondition {
				t.Fatalf("claim = %+v, want a precondition error %q", c, tc.wantError)
			}
		})
	}
}

// No retry storm: a claim that no CSI call can release is abandoned with a
// reason after AbandonAfter failed attempts, counted on the committed
// claim, so a new leader (a new watcher over the same store) goes on from
// the count instead of starting again.
func TestUnreleasableClaimsAreAbandoned(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(f *fixture)
		reason string
	}{
		{"plugin deregistered", func(f *fixture) {
			f.store.mu.Lock()
			delete(f.store.plugins, testPlugin)
			f.store.mu.Unlock()
		}, `plugin "ebs" is no longer registered`},
		{"node gone without external node ID", func(f *fixture) {
			n := agentNode(structs.NodeGone, true, nil)
			n.Plugins[testPlugin].ExternalNodeID = ""
			f.store.putNode(n)
			f.store.mu.Lock()
			f.store.vols[ref("v1")].Claims["a1"].ExternalNodeID = ""
			f.store.mu.Unlock()
		}, `node "n1" is gone and no external node ID is known`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := newAgentFixture(t, agents{})
			f.w.cfg.AbandonAfter = 2
			f.store.putAlloc("a1", testNode, structs.AllocFailed)
			c := newClaim("a1", testNode, structs.ClaimTaken)
			c.TargetPath, c.StagingPath = "", "" // nothing on the node to undo
			f.store.putVolume(newVolume("v1", c))
			tc.setup(f)
			pass := func() {
				t.Helper()
				if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
					t.Fatal(err)
				}
				if c := f.store.claim(ref("v1"), "a1"); c != nil {
					f.clock.Advance(c.NextAttempt.Sub(f.clock.Now()))
				}
			}
			pass()
			if c := f.store.claim(ref("v1"), "a1"); c == nil || c.Attempts != 1 {
				t.Fatalf("after one pass: %+v, want one failed attempt", c)
			}
			// A new leader: a fresh watcher over the committed claims.
			f.w = New(f.w.cfg, f.w.deps, f.w.logger)
			pass()
			pass()
			if c := f.store.claim(ref("v1"), "a1"); c != nil {
				t.Fatalf("claim still there after AbandonAfter attempts: %+v", c)
			}
			cps := f.store.checkpointCalls()
			last := cps[len(cps)-1].Claim
			if last.LastError == nil || !strings.Contains(last.LastError.Message, "abandoned after 2 attempts") ||
				!strings.Contains(last.LastError.Message, tc.reason) {
				t.Fatalf("last checkpoint's note = %+v, want the abandonment reason %q", last.LastError, tc.reason)
			}
			if n := len(f.csi.methods()); n != 0 {
				t.Fatalf("CSI calls = %v, want none", f.csi.methods())
			}
		})
	}
}
