package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// A node ID is not a machine. node1 (machine-node1) holds the claim of an
// ended allocation; the operator force-deregisters node1, and another
// machine (machine-node2, whose plugin answers ext-node2) registers under
// the freed node ID with the same root_dir, as a cloud that names nodes by
// hostname does when an instance is replaced. The registration is refused
// while the claim is held: accepted, the old claim's release ran its node
// steps on machine-node2 (NodeUnstage of the staging path a running
// allocation there published from) and, on a single-node volume, a claim
// on the new node1 attached the disk to a second machine. Judged by the
// driver's own record: no rule broken on either machine, and web-1's
// mounts stay on machine-node1 until a release reaches them there.
// (A helper's hunt found it.)
func TestNodeIDOfHeldClaimsRefusesAnotherMachine(t *testing.T) {
	for _, mode := range []structs.AccessMode{structs.AccessMultiNodeMultiWrite, structs.AccessSingleNodeReader} {
		t.Run(string(mode), func(t *testing.T) {
			h := newHarness(t, "node1", "node2")
			ref := h.volume("default", "vol1", mode)
			h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
			claimMode := structs.ClaimWrite
			if mode == structs.AccessSingleNodeReader {
				claimMode = structs.ClaimRead
			}
			if err := h.claim(ref, "web-1", "node1", claimMode); err != nil {
				t.Fatal(err)
			}
			h.mustAlloc("default", "web-1", "node1", structs.AllocComplete)

			err := h.node2TakesNode1sID()
			if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), `"ext-node1"`) ||
				!strings.Contains(err.Error(), "another node ID") {
				t.Fatalf("another machine registered under the ID of a node whose claims are held: %v, want a conflict naming the claim's machine and what to do", err)
			}
			// The machine under its own ID again is fine, and a running
			// allocation there uses the volume where the mode allows it.
			if _, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: "node2", RootDir: rootDir,
				Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes["node2"].Endpoint()}}}); err != nil {
				t.Fatal(err)
			}
			shared := mode == structs.AccessMultiNodeMultiWrite
			if shared {
				h.mustAlloc("default", "web-2", "node2", structs.AllocRunning)
				if err := h.claim(ref, "web-2", "node2", structs.ClaimWrite); err != nil {
					t.Fatal(err)
				}
			}
			_ = h.w.Assess(h.ctx, ref) // web-1's release
			// node1 was force-deregistered: its claim's node steps are
			// skipped, as documented, whatever machine-node1 still holds.
			// machine-node2 must not have received any of them.
			for _, v := range h.oracle.Violations() {
				if v.Machine == machineOf("node2") {
					t.Errorf("CSI spec violated on machine-node2 by web-1's release: %s", v)
				}
			}
			for _, m := range []string{"NodeUnstageVolume", "NodeUnpublishVolume"} {
				for _, c := range h.nodes["node2"].Calls(m) {
					t.Errorf("web-1's release sent %s (%s%s) to machine-node2", m, c.StagingPath, c.TargetPath)
				}
			}
			if shared {
				inUse(t, h, ref, "web-2", machineOf("node2"))
			}
		})
	}
}

// node2TakesNode1sID: node2's machine leaves its own ID, node1 is
// force-deregistered with its claims held, and node2's machine (its plugin
// endpoint, the same root_dir) asks to be registered as node1; it answers
// the registration's error.
func (h *harness) node2TakesNode1sID() error {
	h.t.Helper()
	if _, _, err := h.srv.DeregisterNode(h.ctx, "node2", false); err != nil {
		h.t.Fatal(err)
	}
	if _, _, err := h.srv.DeregisterNode(h.ctx, "node1", true); err != nil {
		h.t.Fatal(err)
	}
	_, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: "node1", RootDir: rootDir,
		Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes["node2"].Endpoint()}}})
	return err
}
