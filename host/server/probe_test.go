package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// A claim on a node whose agent registered the volume's plugin as not
// answering its probe (the driver restarting) is refused before any CSI
// call: its node steps would fail after an attachment made for them. The
// storage is judged by the plugins' Oracle: nothing attached, staged or
// published. Once the plugin answers again the same claim goes through.
func TestClaimWaitsForAPluginThatDoesNotAnswer(t *testing.T) {
	h := newHarness(t, "node1")
	endpoint := h.nodes["node1"].Endpoint()
	answering := &structs.NodePlugin{Endpoint: endpoint, ExternalNodeID: "ext-node1", StageUnstage: true}
	if err := h.helloPlugin("node1", answering); err != nil {
		t.Fatal(err)
	}
	if err := h.helloPlugin("node1", &structs.NodePlugin{Endpoint: endpoint, ProbeError: "connection refused"}); err != nil {
		t.Fatal(err)
	}
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	err := h.claim(ref, "web-1", "node1", structs.ClaimWrite)
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "did not answer its node agent's last probe (connection refused)") {
		t.Fatalf("claim on a plugin that does not answer: %v, want a conflict naming the probe error", err)
	}
	if calls := h.ctl.AllCalls(); len(h.calls("controller", "ControllerPublishVolume", ref)) > 0 || len(h.calls("node1", "NodeStageVolume", ref)) > 0 {
		t.Fatalf("a refused claim made CSI calls: %+v", calls)
	}
	if v := h.vol(ref); len(v.Claims) != 0 {
		t.Fatalf("a refused claim was recorded: %+v", v.Claims)
	}
	if h.ctl.Attached(externalID("default", "vol1"), "ext-node1") {
		t.Fatal("the storage attached the disk for a refused claim")
	}

	if err := h.helloPlugin("node1", answering); err != nil {
		t.Fatal(err)
	}
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err != nil {
		t.Fatalf("claim once the plugin answers again: %v", err)
	}
	if !h.ctl.Attached(externalID("default", "vol1"), "ext-node1") {
		t.Fatal("the claim went through but the storage holds no attachment")
	}
}
