package watcher

import (
	"context"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// Every release step of a claim goes to the external node ID recorded on
// it at publish, never the node's current one: a node whose agent now
// reports another machine's ID (or whose instance was replaced) must not
// get the claim's ControllerUnpublish, which would detach a disk under the
// other machine's workload or answer OK for an attachment it never had
// and free the claim with the real attachment left behind.
func TestReleaseGoesToTheRecordedExternalNodeID(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recorded string // the claim's ExternalNodeID
		adapter  attach.Adapter
		wantNode string // the ControllerUnpublish's node ID; "" none sent
		wantErr  string // the claim's last error
	}{
		{name: "spec adapter, recorded ID", recorded: "ext-old", adapter: SpecAdapter{}, wantNode: "ext-old"},
		{name: "spec adapter, claim from before the field", recorded: "", adapter: SpecAdapter{}, wantNode: "ext-" + testNode},
		// The node ID's machine today (ext-<testNode>) is not the
		// claim's: an adapter naming it is refused.
		{name: "adapter names the node ID's current machine", recorded: "ext-old",
			adapter: funcAdapter{adapt: func(req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
				return &abi.AdapterResponse{VolumeID: req.Volume.ExternalID, NodeID: "ext-" + testNode}, nil
			}},
			wantErr: `answered node ID "ext-` + testNode + `" for controller-unpublish of node "` + testNode +
				`", whose external node ID is "ext-old" (recorded on the claim at publish)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, testModules{adapter: tc.adapter})
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			c := newClaim("a1", testNode, structs.ClaimNodeDetached)
			c.ExternalNodeID = tc.recorded
			f.store.putVolume(newVolume("v1", c))
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			calls := f.csi.callList()
			if tc.wantNode == "" {
				if len(calls) != 0 {
					t.Fatalf("CSI calls %s, want none", fmtCalls(calls))
				}
				e := f.store.claim(ref("v1"), "a1").LastError
				if e == nil || e.Fault != attach.FaultUnsafe || !strings.Contains(e.Message, tc.wantErr) {
					t.Fatalf("last error %+v, want an unsafe fault containing %q", e, tc.wantErr)
				}
				return
			}
			if len(calls) != 1 || calls[0].Method != mCtlUnpublish || calls[0].NodeID != tc.wantNode {
				t.Fatalf("CSI calls %s, want one ControllerUnpublish to %q", fmtCalls(calls), tc.wantNode)
			}
		})
	}
}

// One machine registered under two node IDs (same plugin endpoint, so the
// same external node ID; same root_dir, so the same staging path), as a
// store from before the one-machine-one-node check may hold it: releasing
// the ended claim on one node ID must neither unstage the shared staging
// path nor detach the shared attachment while the other runs there.
func TestOneMachineUnderTwoNodeIDs(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	twin := readyNode("n1b")
	twin.Plugins[testPlugin].ExternalNodeID = "ext-" + testNode
	f.store.putNode(twin)
	f.store.putAlloc("a1", testNode, structs.AllocRunning)
	f.store.putAlloc("b1", "n1b", structs.AllocComplete)
	ended := newClaim("b1", "n1b", structs.ClaimTaken)
	ended.ExternalNodeID, ended.StagingPath = "ext-"+testNode, "/stage/"+testNode
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken), ended))
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if got := f.csi.methods(); len(got) != 1 || got[0] != mNodeUnpublish {
		t.Fatalf("CSI calls %v, want only b1's NodeUnpublish", got)
	}
	if c := f.store.claim(ref("v1"), "b1"); c != nil {
		t.Fatalf("b1 not released: %+v", c)
	}
}

// A claim taken while its node had no node endpoint staged nothing: it
// does not keep the path another claim staged from being unstaged, and
// the mount is not left behind.
func TestClaimThatStagedNothingHoldsNoStagingPath(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	f.store.putAlloc("a0", testNode, structs.AllocRunning)
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	bare := newClaim("a0", testNode, structs.ClaimTaken)
	bare.StagingPath, bare.TargetPath = "", ""
	f.store.putVolume(newVolume("v1", bare, newClaim("a1", testNode, structs.ClaimTaken)))
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if got := f.csi.methods(); len(got) != 2 || got[0] != mNodeUnpublish || got[1] != mNodeUnstage {
		t.Fatalf("CSI calls %v, want a1's NodeUnpublish and NodeUnstage (a0 holds the attachment only)", got)
	}
}

// A claim's node steps go to the machine it was published on: a node
// registered under the claim's node ID that reports another external
// node ID for the plugin is another machine (a node ID reused by a new
// instance, in a store from before registrations under held claims were
// held to their machine). The steps go to the node on the recorded
// machine, or are skipped as for a node that is gone; before, they went to
// the node ID's current machine, whose staging path a running allocation
// there may publish from.
func TestNodeStepsGoToTheClaimsMachine(t *testing.T) {
	const elsewhere = "unix:///run/csi/elsewhere.sock"
	for _, tc := range []struct {
		name      string
		onMachine bool // a node n2 reports the claim's recorded ID
		want      []csiCall
	}{
		{"its machine registered as n2", true, []csiCall{
			{Method: mNodeUnpublish, Endpoint: elsewhere}, {Method: mNodeUnstage, Endpoint: elsewhere},
			{Method: mCtlUnpublish, Endpoint: ctlEP, NodeID: "ext-old"}}},
		{"its machine gone", false, []csiCall{{Method: mCtlUnpublish, Endpoint: ctlEP, NodeID: "ext-old"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, nil)
			if tc.onMachine {
				n2 := readyNode("n2")
				n2.Plugins[testPlugin].ExternalNodeID, n2.Plugins[testPlugin].Endpoint = "ext-old", elsewhere
				f.store.putNode(n2)
			}
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			c := newClaim("a1", testNode, structs.ClaimTaken)
			c.ExternalNodeID = "ext-old" // testNode reports ext-<testNode>
			f.store.putVolume(newVolume("v1", c))
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			var got []csiCall
			for _, c := range f.csi.callList() {
				got = append(got, csiCall{Method: c.Method, Endpoint: c.Endpoint, NodeID: c.NodeID})
			}
			if fmtCalls(got) != fmtCalls(tc.want) || len(got) != len(tc.want) {
				t.Fatalf("CSI calls %s, want %s", fmtCalls(got), fmtCalls(tc.want))
			}
			for i := range got {
				if got[i].Endpoint != tc.want[i].Endpoint {
					t.Fatalf("call %d %s went to %s, want %s", i, got[i].Method, got[i].Endpoint, tc.want[i].Endpoint)
				}
			}
		})
	}
}

// Two claims of one volume held under one node ID, published on two
// machines, as a state from before a reused node ID was refused may hold
// them (an operator restore of such a snapshot): n1 is machine ext-n1
// today and a2 was published there; a1 was published on ext-old, which is
// registered now as n2. Which node a node ID's steps went to was decided
// once, by whichever claim was read first, so one claim's NodeUnpublish
// and NodeUnstage went to the other's machine and the ControllerUnpublish
// after it detached the disk under its own mounts (a helper's attack).
// Now neither claim's node steps run: both wait, visibly, naming what to
// do; no step reaches a machine the claim was not published on.
func TestClaimsOfOneNodeIDOnTwoMachinesWait(t *testing.T) {
	const elsewhere = "unix:///run/csi/elsewhere.sock"
	f := newFixture(t, Config{}, nil)
	n2 := readyNode("n2")
	n2.Plugins[testPlugin].ExternalNodeID, n2.Plugins[testPlugin].Endpoint = "ext-old", elsewhere
	f.store.putNode(n2)
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putAlloc("a2", testNode, structs.AllocComplete)
	a1 := newClaim("a1", testNode, structs.ClaimTaken)
	a1.ExternalNodeID = "ext-old"
	f.store.putVolume(newVolume("v1", a1, newClaim("a2", testNode, structs.ClaimTaken)))
	for range 3 {
		if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
			t.Fatal(err)
		}
	}
	if calls := f.csi.callList(); len(calls) != 0 {
		t.Fatalf("CSI calls %s, want none: each claim's machine is ambiguous under node ID %q", fmtCalls(calls), testNode)
	}
	for _, id := range []string{"a1", "a2"} {
		c := f.store.claim(ref("v1"), id)
		if c == nil || c.LastError == nil || !strings.Contains(c.LastError.Message, "published on two machines") ||
			!strings.Contains(c.LastError.Message, "force-deregister the volume") {
			t.Fatalf("claim %s: %+v, want it held with an error naming the two machines and what to do", id, c)
		}
	}
}
