package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
)

// stopsAnsweringAdapter is the native adapter, except that at its first
// AdaptRequest (the claim path's prepare, after the "not answering" check
// and before the write-ahead record commits) node's agent registers the
// node again with its plugin not answering: the driver began restarting
// while the claim was on its way. It stands for any interleaving of a
// later Hello with a claim between its snapshot and its commit.
type stopsAnsweringAdapter struct {
	h    *harness
	node string
	once sync.Once
	err  error
}

func (a *stopsAnsweringAdapter) AdaptRequest(ctx context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	a.once.Do(func() {
		a.err = a.h.helloPlugin(a.node, &structs.NodePlugin{Endpoint: a.h.nodes[a.node].Endpoint(), ProbeError: "connection refused"})
	})
	return watcher.SpecAdapter{}.AdaptRequest(ctx, req)
}

func (a *stopsAnsweringAdapter) ClassifyError(ctx context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	return watcher.SpecAdapter{}.ClassifyError(ctx, req)
}

// No claim is published on a node plugin entry that is not answering,
// also when the plugin stops answering between the claim path's check and
// the write-ahead record's commit: the store refuses the record at commit
// (validateClaim), as it does for a node fenced meanwhile. Checked on the
// claim path's snapshot only, ControllerPublish, NodeStage and
// NodePublish reached the driver.
func TestClaimCommitRefusesAPluginThatStoppedAnswering(t *testing.T) {
	h := newHarness(t, "node1")
	endpoint := h.nodes["node1"].Endpoint()
	if err := h.helloPlugin("node1", &structs.NodePlugin{Endpoint: endpoint, ExternalNodeID: "ext-node1", StageUnstage: true}); err != nil {
		t.Fatal(err)
	}
	ad := &stopsAnsweringAdapter{h: h, node: "node1"}
	h.mods.set("default", watcher.DefaultPolicy{}, ad)
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	claimErr := h.claim(ref, "web-1", "node1", structs.ClaimWrite)
	if ad.err != nil {
		t.Fatalf("the agent's not-answering registration was refused: %v", ad.err)
	}
	n, _ := h.store.Snapshot().NodeByID(nil, "node1")
	if np := n.Plugins[testPlugin]; np.Answering() {
		t.Fatalf("setup: node1's plugin is answering: %+v", np)
	}
	pubs := len(h.calls("controller", csitest.ControllerPublish, ref))
	stages := len(h.calls("node1", csitest.NodeStage, ref))
	publishes := len(h.calls("node1", csitest.NodePublish, ref))
	if pubs+stages+publishes > 0 || claimErr == nil {
		t.Fatalf("claim committed while node1's plugin was registered not answering (claim error %v): "+
			"ControllerPublish x%d, NodeStage x%d, NodePublish x%d reached the driver", claimErr, pubs, stages, publishes)
	}
}

// The ID of a node force-deregistered with a claim still held is the
// claim's machine's (ext-node1). Another machine's agent (node2's) taking
// that ID with its plugin not answering reports no external node ID, so
// nothing ties it to the claim's machine: the registration is refused
// until the plugin answers. Taken, web-1's release ran its node steps on
// machine-node2: NodeUnstage of the staging path node2's running
// allocation web-2 publishes from.
func TestUnansweredPluginCannotTakeAHeldNodeID(t *testing.T) {
	h := newHarness(t, "node1", "node2")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	h.liveClaim(ref, "web-2", "node2")
	inUse(t, h, ref, "web-2", machineOf("node2"))

	if _, _, err := h.srv.DeregisterNode(h.ctx, "node1", true); err != nil {
		t.Fatal(err)
	}
	// node2's machine, its agent configured with node ID node1 (an
	// instance replaced and named by hostname), its driver slow to answer
	// the probe.
	err := h.helloPlugin("node1", &structs.NodePlugin{Endpoint: h.nodes["node2"].Endpoint(), ProbeError: "context deadline exceeded"})
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), `nothing says the node is the machine of external node ID "ext-node1"`) {
		t.Fatalf("another machine taking a held node ID with its plugin not answering: %v, want a conflict naming the claim's machine", err)
	}
	_ = h.w.Assess(h.ctx, ref) // web-1's release (its node steps skipped: force-deregistered)
	for _, m := range []string{csitest.NodeUnstage, csitest.NodeUnpublish} {
		for _, c := range h.calls("node2", m, ref) {
			t.Errorf("web-1's release (its claim attached to ext-node1) sent %s (%s%s) to machine-node2", m, c.StagingPath, c.TargetPath)
		}
	}
	inUse(t, h, ref, "web-2", machineOf("node2"))
}

// A registered node's ID taken by another machine's agent (node2's
// machine, its agent configured as node1) with its plugin not answering:
// the store keeps node1's last answers (ext-node1), so the registration
// stands, and web-1's release must not send its node steps through that
// agent to machine-node2, where running web-2 publishes the same volume.
// The steps wait, held by volhost, until the plugin answers; answering as
// ext-node1 (node1's machine back) they run there.
func TestReleaseWaitsForAPluginThatDoesNotAnswer(t *testing.T) {
	h := newHarness(t, "node1", "node2")
	ref := impostorUnderNode1(t, h)
	_ = h.w.Assess(h.ctx, ref)
	noStepsOnNode2(t, h, ref, "web-1's release (its claim published on ext-node1)")
	c := h.vol(ref).Claims["web-1"]
	if c == nil || c.State != structs.ClaimTaken || c.Hold == nil || !strings.Contains(c.Hold.Reason, "did not answer its node agent's last probe") {
		t.Fatalf("web-1's claim: %+v, want it taken and held by volhost for the plugin's probe", c)
	}

	// node1's machine's agent again, its plugin answering.
	if err := h.helloPlugin("node1", &structs.NodePlugin{Endpoint: h.nodes["node1"].Endpoint(), ExternalNodeID: "ext-node1", StageUnstage: true}); err != nil {
		t.Fatal(err)
	}
	_ = h.w.Assess(h.ctx, ref)
	if len(h.calls("node1", csitest.NodeUnpublish, ref)) != 1 {
		t.Fatalf("web-1's release once its plugin answers as ext-node1: %d NodeUnpublish on machine-node1, want 1", len(h.calls("node1", csitest.NodeUnpublish, ref)))
	}
	inUse(t, h, ref, "web-2", machineOf("node2"))
}

// An operator's detach runs a release without the policy's decision, so
// without its hold: the node step itself refuses a plugin that does not
// answer (nodeStep), and nothing reaches the machine the agent now under
// node1's ID is on.
func TestDetachDoesNotStepThroughAPluginThatDoesNotAnswer(t *testing.T) {
	h := newHarness(t, "node1", "node2")
	ref := impostorUnderNode1(t, h)
	_, _ = h.w.Detach(h.ctx, ref.Namespace, ref.ID, "node1")
	noStepsOnNode2(t, h, ref, "an operator's detach of node1")
	if c := h.vol(ref).Claims["web-1"]; c == nil || c.LastError == nil || !strings.Contains(c.LastError.Message, "did not answer its node agent's last probe") {
		t.Fatalf("web-1's claim after the detach: %+v, want its last error naming the plugin's probe", c)
	}
}

// impostorUnderNode1 sets up web-1's ended claim on node1 and running
// web-2 on node2 sharing one volume, then registers node2's machine's
// agent under node ID node1 with its plugin not answering (the store
// keeps node1's answers, so it stands).
func impostorUnderNode1(t *testing.T, h *harness) structs.VolumeRef {
	t.Helper()
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	h.liveClaim(ref, "web-2", "node2")
	inUse(t, h, ref, "web-2", machineOf("node2"))
	if err := h.helloPlugin("node1", &structs.NodePlugin{Endpoint: h.nodes["node2"].Endpoint(), ProbeError: "context deadline exceeded"}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// noStepsOnNode2 fails the test for each node step of ref that reached
// machine-node2, and checks web-2 still has its staging there.
func noStepsOnNode2(t *testing.T, h *harness, ref structs.VolumeRef, what string) {
	t.Helper()
	for _, m := range []string{csitest.NodeUnstage, csitest.NodeUnpublish} {
		for _, c := range h.calls("node2", m, ref) {
			t.Errorf("%s sent %s (%s%s) to machine-node2 through a plugin that did not answer", what, m, c.StagingPath, c.TargetPath)
		}
	}
	inUse(t, h, ref, "web-2", machineOf("node2"))
}
