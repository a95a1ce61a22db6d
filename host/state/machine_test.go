package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// A node's identity towards a plugin is (plugin, external node ID): a
// second node with the same pair is refused whatever path writes it (an
// agent's hello and an API registration are both node upserts), and so is
// a change of external node ID or root_dir while the node holds claims.
// Each refusal is one conflict naming what to do, with nothing changed.
func TestNodeUpsertKeepsOneMachineOneNode(t *testing.T) {
	ebs := func(ext string) map[string]*structs.NodePlugin {
		return map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix:///run/csi/x.sock", ExternalNodeID: ext}}
	}
	node := func(id, root, ext string) *structs.Node {
		n := &structs.Node{ID: id, Status: structs.NodeReady, RootDir: root}
		if ext != "-" {
			n.Plugins = ebs(ext)
		}
		return n
	}
	stagingNode := func(id, root, ext string) *structs.Node {
		n := node(id, root, ext)
		n.Plugins["ebs"].StageUnstage = true
		return n
	}
	// withClaim gives n1 a taken claim on vol-sw, recorded at i-0001 with
	// paths under n1's root_dir, as the claim path records it.
	withClaim := func(f *fixture) {
		f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
			Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, ExternalNodeID: "i-0001",
				StagingPath: "/var/lib/volhost/n1/csi/ebs/staging/default/vol-sw", TargetPath: "/var/lib/volhost/n1/csi/ebs/per-alloc/a1/default/vol-sw"}})
	}
	released := func(f *fixture) {
		withClaim(f)
		f.setAlloc("a1", structs.AllocComplete)
		for _, st := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree} {
			if err := f.checkpoint("vol-sw", "a1", st); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	// gone leaves n1's claim held on a node force-deregistered (its
	// allocation ended, its release not done).
	gone := func(f *fixture) {
		withClaim(f)
		for _, a := range []string{"a1", "a4", "a5"} { // the fixture's allocations on n1
			f.setAlloc(a, structs.AllocComplete)
		}
		f.must(structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: "n1", Force: true})
	}
	tests := []struct {
		name  string
		setup func(*fixture)
		node  *structs.Node
		want  string // "" accepted, else a substring of the conflict
	}{
		{"new node with another machine's ID", nil, node("n9", "", "i-0001"),
			`node "n9": plugin "ebs" reports external node ID "i-0001", which node "n1" already reports`},
		{"agent swaps its ID for another node's", nil, node("n1", "/var/lib/volhost/n1", "i-0002"), `which node "n2" already reports`},
		{"same node, same ID again", nil, node("n1", "/var/lib/volhost/n1", "i-0001"), ""},
		{"new node with a new ID", nil, node("n9", "", "i-0009"), ""},
		{"ID change without claims", nil, node("n1", "/var/lib/volhost/n1", "i-0009"), ""},
		{"root_dir change without claims", nil, node("n1", "/srv/n1", "i-0001"), ""},
		{"ID change with a claim", withClaim, node("n1", "/var/lib/volhost/n1", "i-0009"),
			`attached to plugin "ebs"'s external node ID "i-0001": the node cannot report external node ID "i-0009" while it holds claims`},
		{"root_dir change with a claim", withClaim, node("n1", "/srv/n1", "i-0001"),
			`its root_dir cannot change to "/srv/n1" while it holds claims: drain the node`},
		{"endpoint lost with a claim", withClaim, node("n1", "/var/lib/volhost/n1", ""), ""},
		{"plugin dropped with a claim", withClaim, node("n1", "/var/lib/volhost/n1", "-"),
			`node "n1" holds the claim of allocation "a1" on volume "default/vol-sw" of plugin "ebs": the node cannot stop reporting that plugin while it holds its claims`},
		{"staging capability off with a claim that staged", withClaim, node("n1", "/var/lib/volhost/n1", "i-0001"),
			`which staged it at /var/lib/volhost/n1/csi/ebs/staging/default/vol-sw: plugin "ebs" cannot report STAGE_UNSTAGE_VOLUME false there while it holds claims of that plugin: drain the node`},
		{"staging capability kept with a claim that staged", withClaim, stagingNode("n1", "/var/lib/volhost/n1", "i-0001"), ""},
		{"ID change once the claim is freed", released, node("n1", "/srv/n1", "i-0009"), ""},
		// A node ID freed with claims held is still their machine's.
		{"another machine under a deregistered node's ID with a claim", gone, node("n1", "/var/lib/volhost/n1", "i-0009"),
			`node "n1": the claim of allocation "a1" on volume "default/vol-sw" is still held on this node ID, attached to plugin "ebs"'s external node ID "i-0001": ` +
				`a machine that reports external node ID "i-0009" cannot take the node ID: register it under another node ID`},
		{"its machine back under a deregistered node's ID", gone, node("n1", "/var/lib/volhost/n1", "i-0001"), ""},
		{"its machine back under a deregistered node's ID, another root_dir", gone, node("n1", "/srv/n1", "i-0001"),
			`published at "/var/lib/volhost/n1/csi/ebs/staging/default/vol-sw", outside root_dir "/srv/n1"`},
		{"its machine back under a deregistered node's ID, no endpoint yet", gone, node("n1", "/var/lib/volhost/n1", ""), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if tt.setup != nil {
				tt.setup(f)
			}
			before := f.digest()
			_, err := f.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: tt.node})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if errKind(err) != "conflict" || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v (%s), want a conflict containing %q", err, errKind(err), tt.want)
			}
			if f.digest() != before {
				t.Fatal("a refused node upsert changed the state")
			}
		})
	}
}

// The endpoint lost and found again: a node that reported no ID while its
// claim was taken may report the claim's ID again, and no other.
func TestNodeRegainsOnlyItsRecordedID(t *testing.T) {
	f := newFixture(t)
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
		Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, ExternalNodeID: "i-0001"}})
	n := f.node("n1").Copy()
	n.Plugins["ebs"].ExternalNodeID, n.Plugins["ebs"].Endpoint = "", ""
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n})
	n = n.Copy()
	n.Plugins["ebs"].ExternalNodeID, n.Plugins["ebs"].Endpoint = "i-0007", "unix:///run/csi/n1.sock"
	if _, err := f.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n}); errKind(err) != "conflict" {
		t.Fatalf("regained with another ID: %v, want a conflict", err)
	}
	n.Plugins["ebs"].ExternalNodeID = "i-0001"
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n})
}

// publishedClaim records a taken claim of alloc on node as the claim path
// records one it staged and published: the external node ID it was
// published to, and its staging and target paths.
func (f *fixture) publishedClaim(volID, allocID, node, ext string) {
	f.t.Helper()
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: volID,
		Claim: &structs.Claim{AllocID: allocID, NodeID: node, Mode: structs.ClaimWrite, ExternalNodeID: ext,
			StagingPath: "/root/staging/" + volID, TargetPath: "/root/per-alloc/" + allocID + "/" + volID}})
}

// The store refuses a release's NodeUnstage or ControllerUnpublish that a
// committed claim on the same machine contradicts, by the rules the
// release decided by: per machine (external node ID), not per node ID,
// and only for a claim that staged.
func TestCheckpointRefusesPerMachineStepUnderAnotherClaim(t *testing.T) {
	for _, tc := range []struct {
		name     string
		other    func(f *fixture) // records the other claim, a2's (running on n2)
		unstaged bool
		refused  bool
	}{
		// A store from before the one-machine-one-node check: n2 is n1's
		// machine under another node ID.
		{"unstage under a claim on the same machine", func(f *fixture) { f.publishedClaim("vol-mw", "a2", "n2", "ext-n1") }, true, true},
		{"controller unpublish under a claim on the same machine", func(f *fixture) { f.publishedClaim("vol-mw", "a2", "n2", "ext-n1") }, false, true},
		{"unstage beside another machine", func(f *fixture) { f.publishedClaim("vol-mw", "a2", "n2", "ext-n2") }, true, false},
		{"controller unpublish beside another machine", func(f *fixture) { f.publishedClaim("vol-mw", "a2", "n2", "ext-n2") }, false, false},
		// Taken while the node had no node endpoint: it staged nothing.
		{"unstage beside a claim that staged nothing", func(f *fixture) {
			f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw",
				Claim: &structs.Claim{AllocID: "a2", NodeID: "n2", Mode: structs.ClaimWrite, ExternalNodeID: "ext-n1"}})
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.publishedClaim("vol-mw", "a4", "n1", "ext-n1")
			tc.other(f)
			f.setAlloc("a4", structs.AllocComplete)
			c := f.volume("default", "vol-mw").Claims["a4"].Copy()
			req := &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw", Claim: c}
			if tc.unstaged {
				c.State, req.Unstaged = structs.ClaimNodeDetached, true
			} else {
				f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw", Claim: func() *structs.Claim {
					d := c.Copy()
					d.State = structs.ClaimNodeDetached
					return d
				}()})
				c.State, req.ControllerUnpublished = structs.ClaimControllerDetached, true
			}
			before := f.digest()
			_, err := f.apply(structs.ClaimCheckpointType, req)
			if tc.refused != errors.Is(err, structs.ErrConflict) {
				t.Fatalf("checkpoint: %v, want refused %v", err, tc.refused)
			}
			if tc.refused && (f.digest() != before || !strings.Contains(err.Error(), `allocation "a2" (node "n2")`)) {
				t.Fatalf("refusal %v changed the state or does not name the other claim", err)
			}
		})
	}
}
