package structs

import "testing"

func TestClaimEffects(t *testing.T) {
	published := func(mut func(*Claim)) *Claim {
		c := &Claim{AllocID: "a", NodeID: "n1", State: ClaimTaken, ExternalNodeID: "i-1",
			StagingPath: "/r/staging/v", TargetPath: "/r/per-alloc/a/v"}
		if mut != nil {
			mut(c)
		}
		return c
	}
	tests := []struct {
		name                        string
		claim                       *Claim
		staged, published, attached Effect
	}{
		{"published", published(nil), EffectDone, EffectDone, EffectDone},
		// Taken while its node had no node endpoint: it staged and
		// published nothing, though it is taken and attached.
		{"no node endpoint", published(func(c *Claim) { c.StagingPath, c.TargetPath = "", "" }), EffectNone, EffectNone, EffectDone},
		{"plugin does not stage", published(func(c *Claim) { c.StagingPath = "" }), EffectNone, EffectDone, EffectDone},
		{"NodeUnpublish failed", published(func(c *Claim) { c.LastError = &ClaimError{Step: "node-unpublish"} }),
			EffectDone, EffectUnknown, EffectDone},
		// NodeUnpublished is written before NodeUnstage is sent: from then
		// on the unstage may have run.
		{"unstage next or in doubt", published(func(c *Claim) { c.NodeUnpublished = true }), EffectUnknown, EffectNone, EffectDone},
		{"node-detached", published(func(c *Claim) { c.State = ClaimNodeDetached }), EffectNone, EffectNone, EffectDone},
		{"ControllerUnpublish failed", published(func(c *Claim) {
			c.State, c.LastError = ClaimNodeDetached, &ClaimError{Step: "controller-unpublish"}
		}), EffectNone, EffectNone, EffectUnknown},
		{"controller-detached", published(func(c *Claim) { c.State = ClaimControllerDetached }), EffectNone, EffectNone, EffectNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.claim
			if got := [3]Effect{c.Staged(), c.Published(), c.Attached()}; got != [3]Effect{tt.staged, tt.published, tt.attached} {
				t.Fatalf("staged, published, attached = %v, want %v %v %v", got, tt.staged, tt.published, tt.attached)
			}
		})
	}
}

// Who holds the staging path and the attachment of a volume on a machine,
// as the claim path, the release and the store ask it.
func TestMachineHolders(t *testing.T) {
	const stage = "/r/staging/v"
	claim := func(alloc, node, ext string, mut func(*Claim)) *Claim {
		c := &Claim{AllocID: alloc, NodeID: node, State: ClaimTaken, ExternalNodeID: ext,
			StagingPath: stage, TargetPath: "/r/per-alloc/" + alloc + "/v"}
		if mut != nil {
			mut(c)
		}
		return c
	}
	unstaging := func(c *Claim) { c.NodeUnpublished = true }
	noEndpoint := func(c *Claim) { c.StagingPath, c.TargetPath = "", "" }
	detaching := func(c *Claim) { c.State = ClaimNodeDetached }
	freed := func(c *Claim) { c.State = ClaimReadyToFree }
	otherRoot := func(c *Claim) { c.StagingPath = "/s/staging/v" }

	// me is the claim asking: a new claim on n1 (external node ID i-1).
	me := claim("me", "n1", "i-1", nil)
	tests := []struct {
		name                         string
		other                        *Claim
		stagedFor, needs, attachment bool
		elsewhere                    bool // StagedElsewhere: me would stage a second path
	}{
		{"published on the same node", claim("o", "n1", "i-1", nil), true, true, true, false},
		// Issue: one machine registered as two nodes shares the staging
		// path and the attachment.
		{"same machine under another node ID", claim("o", "n1b", "i-1", nil), true, true, true, false},
		{"another machine with the same root_dir", claim("o", "n2", "i-2", nil), false, false, false, false},
		// The node ID's instance was replaced: another machine.
		{"same node ID, another machine", claim("o", "n1", "i-9", nil), false, false, false, false},
		{"a claim from before external IDs were recorded", claim("o", "n1", "", nil), true, true, true, false},
		// Its NodeUnstage may have run (the answer was lost): the path
		// is in doubt, so a new claim stages again, and the releasing
		// claim does not need it.
		{"unstage in doubt", claim("o", "n1", "i-1", unstaging), false, false, true, false},
		// Taken while the node had no endpoint: staged nothing.
		{"staged nothing", claim("o", "n1", "i-1", noEndpoint), false, false, true, false},
		{"node-detached", claim("o", "n1", "i-1", detaching), false, false, true, false},
		{"ready-to-free", claim("o", "n1", "i-1", freed), false, false, false, false},
		// Same machine, another staging path (published under another
		// root_dir): it does not stage this path, but the release must
		// not unstage under it either.
		{"another staging path", claim("o", "n1", "i-1", otherRoot), false, true, true, true},
		// Its node steps are done: the other path is unstaged.
		{"another staging path, node-detached", claim("o", "n1", "i-1", func(c *Claim) { otherRoot(c); detaching(c) }), false, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &Volume{Claims: map[string]*Claim{"me": me, "o": tt.other}}
			got := [4]bool{v.StagedFor(me) != nil, v.NeedsStaging(me) != nil, v.HoldsAttachment(me) != nil, v.StagedElsewhere(me) != nil}
			if want := [4]bool{tt.stagedFor, tt.needs, tt.attachment, tt.elsewhere}; got != want {
				t.Fatalf("StagedFor, NeedsStaging, HoldsAttachment, StagedElsewhere = %v, want %v", got, want)
			}
		})
	}
	// A claim never holds anything for itself, and the holder named is
	// the first by allocation ID.
	v := &Volume{Claims: map[string]*Claim{"me": me, "b": claim("b", "n1", "i-1", nil), "a": claim("a", "n1b", "i-1", nil)}}
	if o := v.NeedsStaging(me); o == nil || o.AllocID != "a" {
		t.Fatalf("NeedsStaging named %v, want allocation a", o)
	}
	if o := (&Volume{Claims: map[string]*Claim{"me": me}}).HoldsAttachment(me); o != nil {
		t.Fatalf("a claim holds the attachment for itself: %v", o)
	}
}

func TestReleaseNodeID(t *testing.T) {
	if got := (&Claim{ExternalNodeID: "i-1"}).ReleaseNodeID("i-2"); got != "i-1" {
		t.Fatalf("recorded ID: got %q", got)
	}
	if got := (&Claim{}).ReleaseNodeID("i-2"); got != "i-2" {
		t.Fatalf("no recorded ID: got %q", got)
	}
}
