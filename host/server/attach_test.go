package server

import (
	"errors"
	"testing"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// namedSecretAdapter is secretAdapter under a module's name and version,
// so the faults it causes must name it.
type namedSecretAdapter struct{ secretAdapter }

func (namedSecretAdapter) ModuleName() string    { return "secret-naming-adapter" }
func (namedSecretAdapter) ModuleVersion() string { return "1.2.3" }

// An adapter that names a secret the volume lacks meets one rule in both
// directions (attach.Secrets): its bad-output fault, the same ClaimError
// (kind, step, fault, module, version, message) whether the claim path
// refuses a claim with it or the release records it on a claim, and
// neither sends the call without the secret: no ControllerPublish, no
// ControllerUnpublish.
func TestUnknownSecretIsOneFaultAtPublishAndRelease(t *testing.T) {
	h := newHarness(t, "node1")
	released := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	claimed := h.volume("default", "vol2", structs.AccessSingleNodeWriter)
	h.endedClaim(released, "web-1", "node1") // published with the spec adapter
	h.mods.set("default", nil, namedSecretAdapter{secretAdapter{keys: []string{"no-such-key"}}})

	// Publish: the claim is refused with the fault, before any call.
	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	err := h.claim(claimed, "web-2", "node1", structs.ClaimWrite)
	var atPublish *structs.ClaimError
	if !errors.As(err, &atPublish) {
		t.Fatalf("claim: %v, want a refusal carrying the adapter's fault (*structs.ClaimError)", err)
	}
	if n := len(h.calls("controller", csitest.ControllerPublish, claimed)) + len(h.calls("node1", csitest.NodeStage, claimed)); n != 0 {
		t.Fatalf("%d CSI calls for a claim whose adapter named an unknown secret", n)
	}

	// Release: the claim records the fault; its detach is not sent.
	if err := h.w.Assess(h.ctx, released); err != nil {
		t.Fatal(err)
	}
	c := h.vol(released).Claims["web-1"]
	if c == nil || c.LastError == nil {
		t.Fatalf("claim after the release pass: %+v, want it kept with the adapter's fault", c)
	}
	atRelease := c.LastError
	if n := len(h.calls("controller", csitest.ControllerUnpublish, released)); n != 0 {
		t.Fatalf("%d ControllerUnpublish sent without the secret the adapter named", n)
	}

	want := structs.ClaimError{Kind: structs.ErrorModule, Step: attach.StepAdapter, Fault: attach.FaultBadOutput,
		Module: "secret-naming-adapter", ModuleVersion: "1.2.3",
		Message: `secret key "no-such-key" is not a secret of the volume`}
	for dir, got := range map[string]*structs.ClaimError{"publish": atPublish, "release": atRelease} {
		g := *got
		g.Time = want.Time // when it was recorded is each path's own
		if g != want {
			t.Errorf("fault at %s: %+v, want %+v", dir, g, want)
		}
	}
}
