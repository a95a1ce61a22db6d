package state

import (
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// unanswered is n's registration by its agent with plugin id's probe
// failed: the entry carries the endpoint and the error, nothing probed.
func unanswered(n *structs.Node, id, why string) *structs.Node {
	n = n.Copy()
	n.Plugins[id] = &structs.NodePlugin{PluginID: id, Endpoint: n.Plugins[id].Endpoint, ProbeError: why}
	return n
}

// A plugin that does not answer its agent's probe keeps what it last
// answered: its machine is still the node's, so a second node ID
// reporting that machine is refused as before, and the change is an
// event both ways.
func TestUnansweredPluginKeepsItsMachine(t *testing.T) {
	f := newFixture(t)
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
		Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, ExternalNodeID: "i-0001"}})
	// The volumes claimed on the node are woken by either change: their
	// releases' node steps wait while the plugin does not answer.
	woken := func(since uint64) bool {
		vols, err := f.s.Snapshot().VolumesModifiedSince(nil, since)
		if err != nil {
			t.Fatal(err)
		}
		return len(vols) == 1 && vols[0].ID == "vol-sw"
	}
	mark := f.idx
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: unanswered(f.node("n1"), "ebs", "connection refused")})
	if !woken(mark) {
		t.Fatal("the plugin stopped answering: vol-sw, claimed on n1, was not woken")
	}
	got := f.node("n1").Plugins["ebs"]
	if got.ProbeError != "connection refused" || got.ExternalNodeID != "i-0001" || !got.StageUnstage {
		t.Fatalf("n1's ebs after a failed probe: %+v, want the probe error with external node ID i-0001 and STAGE_UNSTAGE kept", got)
	}
	lastEvent := func() *structs.Event {
		evs := f.events()
		return evs[len(evs)-1]
	}
	if e := lastEvent(); e.Type != structs.EventNodeStatus || e.NodeID != "n1" || e.Fields["plugin"] != "ebs" || e.Fields["probe"] != "failed" {
		t.Fatalf("event after the failed probe: %+v", e)
	}

	before := f.digest()
	other := &structs.Node{ID: "n9", Status: structs.NodeReady, Plugins: map[string]*structs.NodePlugin{
		"ebs": {PluginID: "ebs", Endpoint: "unix:///run/csi/n9.sock", ExternalNodeID: "i-0001"}}}
	if _, err := f.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: other}); errKind(err) != "conflict" ||
		!strings.Contains(err.Error(), `which node "n1" already reports`) {
		t.Fatalf("a second node ID on n1's machine while its plugin restarts: %v, want refused as one machine, one node", err)
	}
	if f.digest() != before {
		t.Fatal("a refused registration changed the state")
	}

	again := f.node("n1").Copy()
	again.Plugins["ebs"].ProbeError = ""
	mark = f.idx
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: again})
	if !woken(mark) {
		t.Fatal("the plugin answers again: vol-sw, claimed on n1, was not woken")
	}
	if got := f.node("n1").Plugins["ebs"]; !got.Answering() || got.ExternalNodeID != "i-0001" {
		t.Fatalf("n1's ebs answering again: %+v", got)
	}
	if e := lastEvent(); e.Fields["probe"] != "answering" || e.Fields["plugin"] != "ebs" {
		t.Fatalf("event after the plugin answered again: %+v", e)
	}
}

// A node registered for the first time with a plugin that does not answer
// is registered, with nothing known of the plugin but its error.
func TestNewNodeWithAnUnansweredPlugin(t *testing.T) {
	f := newFixture(t)
	n := &structs.Node{ID: "n9", Status: structs.NodeReady, RootDir: "/var/lib/volhost/n9", Agent: true,
		Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix:///run/csi/n9.sock", ProbeError: "not ready"}}}
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n})
	if got := f.node("n9").Plugins["ebs"]; got.Answering() || got.ExternalNodeID != "" {
		t.Fatalf("n9's ebs: %+v", got)
	}
}

// What a registration may say of a plugin that did not answer.
func TestUnansweredPluginRegistrationIsValidated(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(np *structs.NodePlugin)
		field string
	}{
		{"answers beside the error", func(np *structs.NodePlugin) { np.ExternalNodeID = "i-0009" }, "node.plugins[ebs]"},
		{"a capability beside the error", func(np *structs.NodePlugin) { np.StageUnstage = true }, "node.plugins[ebs]"},
		{"an error too long", func(np *structs.NodePlugin) { np.ProbeError = strings.Repeat("x", structs.MaxProbeErrorLength+1) }, "node.plugins[ebs].probe_error"},
		{"an error not UTF-8", func(np *structs.NodePlugin) { np.ProbeError = "\xff" }, "node.plugins[ebs].probe_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			n := unanswered(f.node("n1"), "ebs", "refused")
			tt.edit(n.Plugins["ebs"])
			before := f.digest()
			if _, err := f.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n}); errKind(err) != "invalid:"+tt.field {
				t.Fatalf("got %v (%s), want invalid %s", err, errKind(err), tt.field)
			}
			if f.digest() != before {
				t.Fatal("a refused registration changed the state")
			}
		})
	}
}
