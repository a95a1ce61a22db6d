package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
)

// stagedBeforePublish fails the test unless alloc's NodePublish on node
// came after a NodeStage of its staging path that followed every
// NodeUnstage of that path: the path alloc publishes from was staged, as
// far as anything sent to the node says.
func (h *harness) stagedBeforePublish(node string, ref structs.VolumeRef, alloc string) {
	h.t.Helper()
	var publish *csitest.Call
	for _, c := range h.calls(node, csitest.NodePublish, ref) {
		if strings.Contains(c.TargetPath, "/"+alloc+"/") {
			publish = &c
		}
	}
	if publish == nil {
		h.t.Fatalf("no NodePublish of %s on %s", alloc, node)
	}
	staged := false
	for _, c := range h.nodes[node].AllCalls() {
		if c.Seq > publish.Seq || c.StagingPath != publish.StagingPath {
			continue
		}
		switch c.Method {
		case csitest.NodeStage:
			staged = true
		case csitest.NodeUnstage:
			staged = false // answered or not, it may have run
		}
	}
	if !staged {
		var seq []string
		for _, c := range h.nodes[node].AllCalls() {
			seq = append(seq, c.Method+" "+c.Code.String())
		}
		h.t.Fatalf("%s was published from %s with no NodeStage since its last NodeUnstage; calls: %s", alloc, publish.StagingPath, strings.Join(seq, ", "))
	}
}

// A release records node_unpublished, sends NodeUnstage, and its answer
// is lost (Unavailable: a node agent's stream breaking mid-step answers
// just that, and the step may have run, or may still be running). The
// claim stays taken, its staging unknown. A new claim on the node is
// refused while that unstage is in doubt: staging again would not help,
// the unmount may end after it and remove the path under the new
// allocation, whose writes then go to the node's root disk. Once the old
// claim's retry has the driver's answer, the claim is taken and stages
// before it publishes.
func TestClaimAfterUnstageInDoubtWaitsThenStages(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	h.nodes["node1"].Script(csitest.NodeUnstage, csitest.Result{Code: codes.Unavailable, Message: "node agent disconnected during NodeUnstageVolume"})
	if err := h.w.Assess(h.ctx, ref); err != nil {
		t.Fatal(err)
	}
	if c := h.vol(ref).Claims["web-1"]; c == nil || c.State != structs.ClaimTaken || !c.NodeUnpublished || c.Staged() != structs.EffectUnknown {
		t.Fatalf("web-1 after the lost NodeUnstage answer: %+v, want taken, node_unpublished, staging unknown", c)
	}

	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	calls := len(h.nodes["node1"].AllCalls()) + len(h.ctl.AllCalls())
	err := h.claim(ref, "web-2", "node1", structs.ClaimWrite)
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "retry the claim") {
		t.Fatalf("claim during the unstage in doubt: %v, want a conflict saying to retry", err)
	}
	if n := len(h.nodes["node1"].AllCalls()) + len(h.ctl.AllCalls()); n != calls {
		t.Fatalf("the refused claim made %d CSI calls", n-calls)
	}

	h.clock.Advance(10 * time.Second) // past web-1's backoff
	if err := h.w.Assess(h.ctx, ref); err != nil {
		t.Fatal(err)
	}
	if v := h.vol(ref); v.Claims["web-1"] != nil {
		t.Fatalf("web-1's retry did not settle its unstage: %+v", v.Claims["web-1"])
	}
	if err := h.claim(ref, "web-2", "node1", structs.ClaimWrite); err != nil {
		t.Fatal(err)
	}
	h.stagedBeforePublish("node1", ref, "web-2")
}

// A claim taken while its node had no node endpoint stages nothing. Once
// the endpoint is back, the next claim on the node must stage (it must
// not count the first as holding the staging path), and its release must
// unstage the path it staged (the first claim, still taken, needs none).
func TestClaimWithoutNodeEndpointHoldsNoStagingPath(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	endpoint := h.nodes["node1"].Endpoint()
	register := func(ep string) {
		t.Helper()
		// Without an endpoint the node keeps the external node ID it was
		// given, so the controller can still attach to it.
		if _, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: "node1", RootDir: rootDir,
			Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: ep, ExternalNodeID: "ext-node1"}}}); err != nil {
			t.Fatal(err)
		}
	}
	register("")
	h.liveClaim(ref, "web-0", "node1")
	if c := h.vol(ref).Claims["web-0"]; c.StagingPath != "" || len(h.calls("node1", csitest.NodeStage, ref)) != 0 {
		t.Fatalf("a claim without a node endpoint staged: %+v", c)
	}
	register(endpoint)

	h.endedClaim(ref, "web-1", "node1")
	h.stagedBeforePublish("node1", ref, "web-1")
	if err := h.w.Assess(h.ctx, ref); err != nil {
		t.Fatal(err)
	}
	if n := len(h.calls("node1", csitest.NodeUnstage, ref)); n != 1 {
		t.Fatalf("%d NodeUnstage releasing web-1, want 1: web-0 staged nothing, so the mount is left behind", n)
	}
	if v := h.vol(ref); v.Claims["web-1"] != nil || v.Claims["web-0"] == nil {
		t.Fatalf("claims %v: want web-1 released, web-0 taken", v.Claims)
	}
	if !h.ctl.Attached(externalID(ref.Namespace, ref.ID), "ext-node1") {
		t.Fatal("the attachment web-0 uses is gone")
	}
}

// A node agent's hello that reports another node's external node ID is
// refused: it would redirect that node's ControllerUnpublish here, and
// this node's there.
func TestAgentHelloWithAnotherNodesExternalIDIsRefused(t *testing.T) {
	h := newHarness(t, "node1", "node2")
	_, err := h.srv.RegisterAgentNode(h.ctx, &structs.Node{ID: "node1", RootDir: rootDir,
		Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: "unix:///run/csi.sock", ExternalNodeID: "ext-node2", StageUnstage: true}}})
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), `which node "node2" already reports`) {
		t.Fatalf("hello with node2's external node ID: %v, want a conflict naming node2", err)
	}
	n, err := h.store.Snapshot().NodeByID(nil, "node1")
	if err != nil || n.Plugins[testPlugin].ExternalNodeID != "ext-node1" || n.Agent {
		t.Fatalf("node1 after the refused hello: %+v, %v", n, err)
	}
}

// secretAdapter names secret keys, as a module adapter does.
type secretAdapter struct{ keys []string }

func (a secretAdapter) AdaptRequest(ctx context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	resp, err := watcher.SpecAdapter{}.AdaptRequest(ctx, req)
	if err == nil {
		resp.SecretKeys = a.keys
	}
	return resp, err
}

func (secretAdapter) ClassifyError(ctx context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	return watcher.SpecAdapter{}.ClassifyError(ctx, req)
}

// An adapter that names a secret the volume lacks is wrong about the
// volume at publish as at release (a fault there): the claim is refused
// before any CSI call, not published without the secret.
func TestClaimRefusesAnAdapterNamingAnUnknownSecret(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	h.mods.set("default", nil, secretAdapter{keys: []string{"no-such-key"}})
	err := h.claim(ref, "web-1", "node1", structs.ClaimWrite)
	if err == nil || !strings.Contains(err.Error(), `secret key "no-such-key" is not a secret of the volume`) {
		t.Fatalf("claim: %v, want a refusal naming the secret key", err)
	}
	if n := len(h.calls("controller", csitest.ControllerPublish, ref)) + len(h.calls("node1", csitest.NodeStage, ref)); n != 0 {
		t.Fatalf("%d CSI calls for a claim whose adapter named an unknown secret", n)
	}
}

// A claim step whose answer was lost may have run: the rollback undoes it
// like a step that succeeded (every undo is idempotent by the CSI spec),
// so no mount is left that no claim accounts for.
func TestRollbackUndoesAStepWhoseAnswerWasLost(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	h.nodes["node1"].Script(csitest.NodePublish, csitest.Result{Code: codes.Unavailable, Message: "node agent disconnected during NodePublishVolume"})
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
		t.Fatal("claim with a lost NodePublish answer succeeded")
	}
	publish := h.calls("node1", csitest.NodePublish, ref)
	unpublish := h.calls("node1", csitest.NodeUnpublish, ref)
	if len(publish) != 1 || len(unpublish) != 1 || unpublish[0].TargetPath != publish[0].TargetPath {
		t.Fatalf("NodePublish %v, NodeUnpublish %v: want the target the lost NodePublish may have mounted unpublished", publish, unpublish)
	}
	if n := len(h.calls("node1", csitest.NodeUnstage, ref)); n != 1 {
		t.Fatalf("%d NodeUnstage, want 1", n)
	}
	if h.ctl.Attached(externalID(ref.Namespace, ref.ID), "ext-node1") {
		t.Fatal("the failed claim left its attachment")
	}
}

// A root_dir that is relative, unclean or "/" is refused on both ways a
// node is registered, and the node stays as it was: an agent's hello
// took one the API refused, so "/srv/../etc" named /srv to the store and
// /etc to the driver.
func TestRegistrationRefusesARootDirNotAbsoluteAndClean(t *testing.T) {
	h := newHarness(t, "node1")
	register := map[string]func(*structs.Node) (*structs.Node, error){
		"api":   func(n *structs.Node) (*structs.Node, error) { return h.srv.RegisterNode(h.ctx, n) },
		"agent": func(n *structs.Node) (*structs.Node, error) { return h.srv.RegisterAgentNode(h.ctx, n) },
	}
	for way, reg := range register {
		for _, root := range []string{"var/lib/volhost", "/srv/../etc", "/srv/n1/", "/"} {
			before, err := h.store.Snapshot().NodeByID(nil, "node1")
			if err != nil {
				t.Fatal(err)
			}
			_, err = reg(&structs.Node{ID: "node1", RootDir: root,
				Plugins: map[string]*structs.NodePlugin{testPlugin: {ExternalNodeID: "ext-node1"}}})
			var ve *structs.ValidationError
			if !errors.As(err, &ve) || ve.Field != "node.root_dir" || !strings.Contains(err.Error(), strconv.Quote(root)) {
				t.Errorf("%s registration with root_dir %q: %v, want invalid naming node.root_dir and the value", way, root, err)
			}
			after, err := h.store.Snapshot().NodeByID(nil, "node1")
			if err != nil {
				t.Fatal(err)
			}
			if after.RootDir != before.RootDir || after.Agent != before.Agent || after.ModifyIndex != before.ModifyIndex {
				t.Errorf("%s registration with root_dir %q changed the node: %+v", way, root, after)
			}
		}
	}
}
