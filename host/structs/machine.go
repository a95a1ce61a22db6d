package structs

import (
	"cmp"
	"fmt"
	"slices"
)

// Machine is a node's identity towards a CSI plugin: the plugin and the
// external node ID its driver reports (NodeGetInfo). Staging paths and
// controller attachments belong to the machine, not to volhost's node ID:
// ControllerUnpublishVolume names the external node ID, so two node IDs
// with one external node ID are one attachment, and releasing a claim on
// one detaches the disk under the other's workload.
type Machine struct {
	PluginID       string
	ExternalNodeID string
}

func (m Machine) String() string {
	return fmt.Sprintf("plugin %q external node ID %q", m.PluginID, m.ExternalNodeID)
}

// Machines lists the machine n is for each of its plugins that reported an
// external node ID, sorted by plugin.
func (n *Node) Machines() []Machine {
	var out []Machine
	for id, np := range n.Plugins {
		if np != nil && np.ExternalNodeID != "" {
			out = append(out, Machine{PluginID: id, ExternalNodeID: np.ExternalNodeID})
		}
	}
	slices.SortFunc(out, func(a, b Machine) int { return cmp.Compare(a.PluginID, b.PluginID) })
	return out
}

// ReleaseNodeID is the external node ID every release step of the claim
// names: the one recorded on it at publish, never the node's current one
// (a node whose instance was replaced, or whose agent reported another
// machine's ID, would otherwise get the ControllerUnpublish of an
// attachment it does not have, answer OK, and leave the real one behind).
// current is the node's ID today; it is used only for a claim that
// recorded none, which claims published before the field existed, or
// while the node had no node endpoint, may be.
func (c *Claim) ReleaseNodeID(current string) string {
	if c.ExternalNodeID != "" {
		return c.ExternalNodeID
	}
	return current
}

// Effect is what a claim's CSI step did to its machine, as far as the host
// knows: a call whose answer was lost (Unavailable, DeadlineExceeded, a
// node agent's stream breaking mid-step) may have run.
type Effect uint8

const (
	EffectNone    Effect = iota // not done, or undone
	EffectDone                  // done, and not undone since
	EffectUnknown               // a call that would change it may have run
)

func (e Effect) String() string {
	switch e {
	case EffectDone:
		return "done"
	case EffectUnknown:
		return "unknown"
	}
	return "none"
}

// The effects are derived from what the claim records before each
// destructive call, not from a note written after its answer: a leader
// that crashes between a call and its answer writes nothing after it, so
// only a record written ahead says that the call may have run. The release
// checkpoints state taken until its node steps are done, NodeUnpublished
// before it sends NodeUnstage (watcher nodeStep), and node-detached before
// ControllerUnpublish; a failed call leaves its step's last error on the
// claim. A claim that staged or published nothing has no path for it (it
// was taken while its node had no node endpoint).

// Staged is whether the staging path the claim published from is staged
// for it: unknown while the claim is publishing (its NodeStage may have
// run, or not yet) or once its release may have sent NodeUnstage; none
// once it is past its node steps; a claim that recorded no staging path
// staged nothing, whatever its state.
//
// A claim restored from an operator snapshot (Restored) is unknown too:
// its machine kept running after the snapshot, and may have unstaged the
// path since.
func (c *Claim) Staged() Effect {
	switch {
	case c.StagingPath == "" || !c.beforeNodeSteps():
		return EffectNone
	case c.NodeUnpublished || c.Restored || c.State == ClaimPublishing:
		return EffectUnknown
	}
	return EffectDone
}

// beforeNodeSteps: the claim's release has not checkpointed its node steps
// done (publishing or taken).
func (c *Claim) beforeNodeSteps() bool {
	return c.State == ClaimTaken || c.State == ClaimPublishing
}

// Published is whether the claim's target is published: unknown while the
// claim is publishing (its NodePublish may have run) or when its
// NodeUnpublish failed (the call may have run), none once it is recorded
// done or the claim is past its node steps.
func (c *Claim) Published() Effect {
	switch {
	case c.TargetPath == "" || !c.beforeNodeSteps() || c.NodeUnpublished:
		return EffectNone
	case c.State == ClaimPublishing, c.LastError != nil && c.LastError.Step == stepNodeUnpublish:
		return EffectUnknown
	}
	return EffectDone
}

// Attached is whether the claim holds the controller attachment: unknown
// while the claim is publishing (its ControllerPublish may have run) or
// when its ControllerUnpublish failed (the call may have run), none once
// its controller step is done or when its publish attached nothing
// (Unattached: its plugin had no PUBLISH_UNPUBLISH_VOLUME then).
func (c *Claim) Attached() Effect {
	switch {
	case c.Unattached || c.State.Order() >= ClaimControllerDetached.Order():
		return EffectNone
	case c.State == ClaimPublishing:
		return EffectUnknown
	case c.State == ClaimNodeDetached && c.LastError != nil && c.LastError.Step == stepControllerUnpublish:
		return EffectUnknown
	}
	return EffectDone
}

// The release step names (abi.Step*, which this package cannot import).
const (
	stepNodeUnpublish       = "node-unpublish"
	stepNodeUnstage         = "node-unstage"
	stepControllerUnpublish = "controller-unpublish"
)

// SameMachine reports whether claims a and b of one volume are on the same
// machine: the same external node ID when both recorded one (two node IDs
// may name one machine; one node ID whose instance was replaced names
// two), else the same node.
func SameMachine(a, b *Claim) bool {
	if a.ExternalNodeID != "" && b.ExternalNodeID != "" {
		return a.ExternalNodeID == b.ExternalNodeID
	}
	return a.NodeID == b.NodeID
}

// The questions the claim path (host/server) and the release (watcher)
// ask about a volume's staging path and controller attachment on one
// machine, and that the store asks again when a release's checkpoint
// says it unstaged or detached (host/state). Each answers with the other
// claim that decides it (nil: none), in allocation order so a message
// naming it is stable.

// StagedFor is a claim other than c, on c's machine, that certainly staged
// c's staging path and has not begun to unstage it: then c may publish
// from the path without NodeStageVolume. Anything less (nobody, or only a
// claim whose NodeUnstage may have run) and c must stage again, which the
// CSI spec makes idempotent.
func (v *Volume) StagedFor(c *Claim) *Claim {
	return v.otherClaim(c, func(o *Claim) bool {
		return SameMachine(c, o) && o.StagingPath == c.StagingPath && o.Staged() == EffectDone
	})
}

// StagedElsewhere is a claim other than c, on c's machine, that recorded
// a staging path other than c's and may still have it staged (it has not
// finished its node steps): c would stage the volume a second time on one
// machine (CSI spec: NodeStageVolume once per volume per node), and its
// release and that claim's would each leave the other's path to the
// other, so one is never unstaged and the last ControllerUnpublish
// detaches the disk under it. It happens when a machine comes back under
// another node ID with another root_dir. A claim that stages nothing
// (c.StagingPath empty) conflicts with nobody.
func (v *Volume) StagedElsewhere(c *Claim) *Claim {
	if c.StagingPath == "" {
		return nil
	}
	return v.otherClaim(c, func(o *Claim) bool {
		return SameMachine(c, o) && o.StagingPath != "" && o.StagingPath != c.StagingPath && o.beforeNodeSteps()
	})
}

// NeedsStaging is a claim other than c, on c's machine, that still needs
// the volume staged there: one that staged and has not begun to unstage,
// or whose target may still be published from its staging path (a
// restored claim, whose staging is in doubt but whose allocation may be
// running on it; a publishing claim: a publish in flight, a leader that
// died mid-publish, a refused claim whose rollback stopped). NodeUnstage
// for c is sent only when there is none (CSI spec: no NodeUnstage while a
// target is published from the staging path). A claim that staged nothing
// (taken while its node had no node endpoint) needs nothing, whatever its
// state.
func (v *Volume) NeedsStaging(c *Claim) *Claim {
	return v.otherClaim(c, func(o *Claim) bool {
		return SameMachine(c, o) && o.StagingPath != "" && (o.Staged() == EffectDone || o.Published() != EffectNone)
	})
}

// HoldsAttachment is a claim other than c, on c's machine, that holds the
// controller attachment or may (its ControllerUnpublish in doubt): the
// attachment is per (volume, external node ID), so ControllerUnpublish for
// c is sent only when there is none, and a claim path's rollback undoes
// its ControllerPublish only when there was none before it.
func (v *Volume) HoldsAttachment(c *Claim) *Claim {
	return v.otherClaim(c, func(o *Claim) bool {
		return SameMachine(c, o) && o.Attached() != EffectNone
	})
}

func (v *Volume) otherClaim(c *Claim, match func(*Claim) bool) *Claim {
	var found *Claim
	for id, o := range v.Claims {
		if o == nil || id == c.AllocID || o.State == ClaimReadyToFree || !match(o) {
			continue
		}
		if found == nil || o.AllocID < found.AllocID {
			found = o
		}
	}
	return found
}

// SelectSecrets is the secrets of v a CSI call of its claims sends: those
// named by keys, an adapter's answer (nil: all of them, what the spec
// adapter answers; modules never see secret values). A key that is not a
// secret of the volume is an error, at publish and at release alike: a
// module that names a secret the volume lacks is wrong about the volume,
// and sending the call without it would only move the failure into the
// driver (a publish without it, or a release that cannot run later).
func (v *Volume) SelectSecrets(keys []string) (map[string]string, error) {
	if keys == nil {
		return v.Secrets, nil
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		val, ok := v.Secrets[k]
		if !ok {
			return nil, fmt.Errorf("secret key %q is not a secret of the volume", k)
		}
		out[k] = val
	}
	return out, nil
}
