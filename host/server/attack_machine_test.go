package server

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
)

// Red-team tests of the release path and of machine identity: each drives
// the server through its public calls into a break a review found, and is
// judged by the plugins' Oracle (what the machines and the storage really
// hold, and the CSI spec's preconditions on every call), not by volhost's
// own record.

// helloPlugin is node id's agent connecting with np as its report of the
// test plugin (nil: the plugin is not reported at all).
func (h *harness) helloPlugin(id string, np *structs.NodePlugin) error {
	n := &structs.Node{ID: id, RootDir: rootDir, Plugins: map[string]*structs.NodePlugin{}}
	if np != nil {
		n.Plugins[testPlugin] = np
	}
	_, err := h.srv.RegisterAgentNode(h.ctx, n)
	if err == nil {
		h.agents.connect(id, true)
	}
	return err
}

// refusedChangesNothing checks that a refused registration of node id left
// it as it was, and that the refusal says what to do.
func refusedChangesNothing(t *testing.T, h *harness, id string, before *structs.Node, err error) {
	t.Helper()
	if !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("refusal %v is not a conflict", err)
	}
	if after, _ := h.store.Snapshot().NodeByID(nil, id); !equalNodes(before, after) {
		t.Fatalf("a refused registration (%v) changed node %s: %+v -> %+v", err, id, before, after)
	}
}

// A node re-registered with STAGE_UNSTAGE_VOLUME off while a claim staged
// there must not make that claim's release skip NodeUnstage: the staging
// path exists whatever the node says today, and ControllerUnpublish would
// then detach the disk under a mounted filesystem. The re-registration is
// refused while the node holds the claim; either way the driver must see
// the unstage before the detach.
func TestStageCapabilityToggleKeepsUnstage(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.liveClaim(ref, "web-1", "node1")
	before, _ := h.store.Snapshot().NodeByID(nil, "node1")
	err := h.helloPlugin("node1", &structs.NodePlugin{Endpoint: h.nodes["node1"].Endpoint(), ExternalNodeID: "ext-node1", StageUnstage: false})
	if err != nil {
		refusedChangesNothing(t, h, "node1", before, err)
	}
	h.endAndReleaseClean(ref, "web-1", "node1")
}

// A node agent's hello that no longer reports the volume's plugin while
// the node holds a claim of it must not strand the claim (its release
// could never reach the node again) nor make it skip the node steps: the
// hello is refused and the release runs.
func TestPluginRemovedFromNodeUnderClaimRefused(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.liveClaim(ref, "web-1", "node1")
	before, _ := h.store.Snapshot().NodeByID(nil, "node1")
	if err := h.helloPlugin("node1", nil); err != nil {
		refusedChangesNothing(t, h, "node1", before, err)
	}
	h.endAndReleaseClean(ref, "web-1", "node1")
}

// A plugin re-registered without its controller (so without
// PUBLISH_UNPUBLISH_VOLUME) while a claim it attached is held must not
// make the release skip ControllerUnpublish: the attachment exists. The
// re-registration is refused while the plugin's volumes hold claims; the
// release detaches what the claim attached.
func TestControllerCapabilityToggleKeepsDetach(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.liveClaim(ref, "web-1", "node1")
	before, _ := h.store.Snapshot().PluginByID(nil, testPlugin)
	if _, err := h.srv.RegisterPlugin(h.ctx, &structs.Plugin{ID: testPlugin}); err != nil {
		if !errors.Is(err, structs.ErrConflict) {
			t.Fatalf("refusal %v is not a conflict", err)
		}
		if after, _ := h.store.Snapshot().PluginByID(nil, testPlugin); !equalPlugins(before, after) {
			t.Fatalf("a refused registration (%v) changed the plugin: %+v -> %+v", err, before, after)
		}
	}
	h.endAndReleaseClean(ref, "web-1", "node1")
}

// A claim's record of its publish says what its release undoes, whatever
// the plugin says later: a claim made while the plugin had no controller
// attached nothing, and its release sends no ControllerUnpublish even once
// the plugin has one.
func TestUnattachedClaimSendsNoControllerUnpublish(t *testing.T) {
	h := newHarness(t, "node1")
	if _, err := h.srv.RegisterPlugin(h.ctx, &structs.Plugin{ID: testPlugin}); err != nil {
		t.Fatal(err)
	}
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.liveClaim(ref, "web-1", "node1")
	if c := h.vol(ref).Claims["web-1"]; !c.Unattached {
		t.Fatalf("a claim published with no controller does not record it: %+v", c)
	}
	h.mustAlloc("default", "web-1", "node1", structs.AllocComplete)
	h.releaseAll(ref)
	if n := len(h.calls("controller", csitest.ControllerUnpublish, ref)); n != 0 {
		t.Fatalf("%d ControllerUnpublish for a claim that attached nothing", n)
	}
	nothingLeft(t, h, ref)
}

// An operator snapshot restored after the machines moved on: a claim the
// snapshot shows taken was released since (unstaged, detached). A new
// claim on that machine must stage again (idempotent) instead of trusting
// the restored claim's "staged", or it publishes from an empty directory.
// Its release and the restored claim's then leave nothing behind.
func TestRestoredClaimsPutStagingInDoubt(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.liveClaim(ref, "web-1", "node1")
	var snap bytes.Buffer
	if err := h.cluster.SaveSnapshot(h.ctx, &snap); err != nil {
		t.Fatal(err)
	}
	h.mustAlloc("default", "web-1", "node1", structs.AllocComplete)
	h.releaseAll(ref)
	nothingLeft(t, h, ref)

	if err := h.cluster.RestoreSnapshot(h.ctx, &snap, cluster.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
	if c := h.vol(ref).Claims["web-1"]; c == nil || !c.Restored {
		t.Fatalf("the restored claim is not marked restored: %+v", c)
	}

	// The restored claim's release keeps web-2's staging and attachment.
	h.mustAlloc("default", "web-1", "node1", structs.AllocComplete)
	_ = h.w.Assess(h.ctx, ref)
	noViolations(t, h)
	inUse(t, h, ref, "web-2", machineOf("node1"))
	h.endAndReleaseClean(ref, "web-2", "node1")
}

// A node deregistered (forced, with an ended claim still to release) whose
// machine is registered again under another node ID is not gone: the
// claim's node steps go to the node now on that machine. Skipping them
// leaves the target mounted and the path staged, and ControllerUnpublish
// then detaches the disk under them.
func TestNodeGoneButMachineBackGetsNodeSteps(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	h.machineBackAs("node1", aliasNode, rootDir)
	h.releaseClean(ref)
	if n := len(h.calls("node1", csitest.NodeUnstage, ref)); n == 0 {
		t.Fatal("the claim's staging path was never unstaged on its machine")
	}
}

// The same, with a running allocation under the new node ID on the same
// machine: the old claim's release unpublishes its own target and leaves
// the staging path and the attachment the running one uses.
func TestNodeGoneButMachineBackKeepsLiveClaim(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	h.machineBackAs("node1", aliasNode, rootDir)
	h.mustAlloc("default", "web-2", aliasNode, structs.AllocRunning)
	if err := h.claim(ref, "web-2", aliasNode, structs.ClaimWrite); err != nil {
		t.Fatal(err)
	}
	_ = h.w.Assess(h.ctx, ref)
	noViolations(t, h)
	inUse(t, h, ref, "web-2", machineOf("node1"))
	if st := h.oracle.Machine(machineOf("node1")); len(st.Published) != 1 {
		t.Fatalf("web-1's target is still published beside web-2's: %v", st.Published)
	}
	h.mustAlloc("default", "web-2", aliasNode, structs.AllocComplete)
	h.releaseClean(ref)
}

// withCSITimeout replaces the harness's watcher with one whose CSI calls
// time out after d (the server's claim path is unchanged).
func (h *harness) withCSITimeout(d time.Duration) {
	h.t.Helper()
	h.w.SetEnabled(false)
	h.w = watcher.New(watcher.Config{
		Clock: h.clock, Jitter: -1, BackoffBase: time.Second, BackoffMax: 8 * time.Second,
		StuckAfter: time.Minute, CSITimeout: d, GCInterval: 24 * time.Hour,
	}, watcher.Deps{
		Feed: idleFeed{}, State: onlyAsked{h.store.Reader()}, Writer: h.cluster.ClaimWriter(),
		Node: h.srv.csi, Controller: h.srv.csi, Modules: h.mods, Leadership: h.cluster, Locks: h.srv.locks, Agents: h.agents,
	}, hclog.NewNullLogger())
	h.srv.SetReleaser(h.w)
	h.w.SetEnabled(true)
	h.t.Cleanup(func() { h.w.SetEnabled(false) })
}

// A NodeUnstage whose caller's deadline passed while the driver goes on
// unmounting: the release's lock is released with the answer lost, and a
// claim that stages and publishes on that machine now has its staging
// path removed under it when the unmount ends. While a release's unstage
// on a machine is in doubt, a claim there is refused (it says why and to
// retry); once the release's retry has its answer, it is taken.
func TestClaimWaitsForUnstageInDoubt(t *testing.T) {
	h := newHarness(t, "node1")
	h.withCSITimeout(200 * time.Millisecond)
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	unmounting := make(chan struct{})
	h.nodes["node1"].Script(csitest.NodeUnstage, csitest.Result{Block: unmounting, Ran: true})
	_ = h.w.Assess(h.ctx, ref)
	if c := h.vol(ref).Claims["web-1"]; c == nil || c.State != structs.ClaimTaken || !c.NodeUnpublished {
		t.Fatalf("the release did not stop at its unstage: %+v", c)
	}

	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	err := h.claim(ref, "web-2", "node1", structs.ClaimWrite)
	close(unmounting) // the driver's unmount ends
	if err := h.nodes["node1"].WaitFor(h.ctx, func() bool { return h.nodes["node1"].InFlight(csitest.NodeUnstage) == 0 }); err != nil {
		t.Fatal(err)
	}
	h.refusedWhile(ref, "web-2", "node1", err, "a NodeUnstage of the volume was in doubt", "")
	if stages := h.calls("node1", csitest.NodeStage, ref); len(stages) != 1 {
		t.Fatalf("the refused claim sent NodeStage: %d stages", len(stages))
	}

	// The release's retry settles the unstage; the claim is then taken.
	h.retryRelease(ref)
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
	h.endAndReleaseClean(ref, "web-2", "node1")
}

func equalPlugins(a, b *structs.Plugin) bool { return reflect.DeepEqual(a, b) }

// A driver that serializes its calls per volume answers a retried
// NodeUnstage ABORTED while the first is still running (CSI spec: an
// operation is pending for the volume): that answer says nothing about the
// unmount, so the doubt stays and claims on the machine keep waiting; the
// retry after the unmount ended settles it.
func TestUnstageRetryAbortedKeepsDoubt(t *testing.T) {
	h := newHarness(t, "node1")
	h.withCSITimeout(200 * time.Millisecond)
	h.nodes["node1"].SetAbortPending(true)
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	unmounting := make(chan struct{})
	h.nodes["node1"].Script(csitest.NodeUnstage, csitest.Result{Block: unmounting, Ran: true})
	_ = h.w.Assess(h.ctx, ref)

	h.clock.Advance(10 * time.Second)
	_ = h.w.Assess(h.ctx, ref) // the retry: ABORTED, the first still runs
	unstages := h.calls("node1", csitest.NodeUnstage, ref)
	if len(unstages) != 2 || unstages[1].Code != codes.Aborted {
		t.Fatalf("want the retry answered ABORTED while the first unstage runs, got %d unstages", len(unstages))
	}
	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	if err := h.claim(ref, "web-2", "node1", structs.ClaimWrite); !errors.Is(err, structs.ErrConflict) {
		close(unmounting)
		t.Fatalf("claim while the unstage is pending: %v, want a conflict", err)
	}

	close(unmounting)
	if err := h.nodes["node1"].WaitFor(h.ctx, func() bool { return h.nodes["node1"].InFlight(csitest.NodeUnstage) == 0 }); err != nil {
		t.Fatal(err)
	}
	h.retryRelease(ref)
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
	h.endAndReleaseClean(ref, "web-2", "node1")
}

// A node that holds a claim cannot move its root_dir, by its agent's hello
// or by a direct re-registration: the claim's paths are under the old one,
// and the next claim there would stage a second path for the volume on
// the same machine. Refused with nothing changed; the next claim and both
// releases then leave the driver in order and nothing behind.
func TestRootDirChangeUnderClaimRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *harness) error
	}{
		{"agent hello", func(h *harness) error {
			_, err := h.hello("node1", h.nodes["node1"].Endpoint(), "ext-node1", altRoot)
			return err
		}},
		{"direct registration", func(h *harness) error {
			_, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: "node1", RootDir: altRoot,
				Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes["node1"].Endpoint()}}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "node1")
			ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
			h.liveClaim(ref, "web-1", "node1")
			before, _ := h.store.Snapshot().NodeByID(nil, "node1")
			if err := tc.change(h); err != nil {
				refusedChangesNothing(t, h, "node1", before, err)
			}
			h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
			h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
			for _, a := range []string{"web-1", "web-2"} {
				h.mustAlloc("default", a, "node1", structs.AllocComplete)
			}
			h.releaseClean(ref)
		})
	}
}
