package state

import (
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// Registrations under held claims.
//
// What a release undoes is what each claim recorded at publish: its
// staging path (staged only when the node plugin had STAGE_UNSTAGE_VOLUME),
// its target path (only when the node had a node endpoint), the external
// node ID it was attached to and whether it was attached at all
// (Claim.Unattached). A registration that contradicts a held claim's
// record (any state before ready-to-free) is refused at commit, here,
// whatever path it comes by (the API, a node agent's hello, a plugin
// re-registration), with one error naming the claim and what to do: the
// claims that follow would stage, publish or attach differently from the
// ones still held on the same machine, and a release that went by today's
// registration would skip an unstage or a detach of something that exists
// (validateMachineIdentity covers the external node ID and root_dir).

// drainFirst is what an operator does instead.
const drainFirst = "drain the node (stop its allocations and let their claims be released) " +
	"or force-deregister those volumes, then register it again"

// heldClaimsOn calls f for every claim before ready-to-free on node
// nodeID, in volume then allocation order, until f returns an error.
func heldClaimsOn(snap *Snapshot, nodeID string, f func(v *structs.Volume, c *structs.Claim) error) error {
	vols, err := snap.VolumesClaimedOnNode(nil, nodeID)
	if err != nil {
		return err
	}
	for _, v := range vols {
		for _, id := range v.ClaimIDs() {
			if c := v.Claims[id]; c != nil && c.NodeID == nodeID && c.State != structs.ClaimReadyToFree {
				if err := f(v, c); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// validateNodeUnderClaims refuses a node registration that removes the
// plugin of a claim the node holds, or reports a staging capability its
// claims' records contradict (a claim that staged needs STAGE_UNSTAGE_VOLUME,
// one published without staging needs it off). A plugin reported with no
// endpoint or no external node ID (its socket away, nothing probed)
// reports no capability: that is not a change, and its claims' releases
// wait for the endpoint.
func validateNodeUnderClaims(snap *Snapshot, n *structs.Node) error {
	old, err := snap.NodeByID(nil, n.ID)
	if err != nil || old == nil {
		return err
	}
	return heldClaimsOn(snap, n.ID, func(v *structs.Volume, c *structs.Claim) error {
		np := n.Plugins[v.PluginID]
		if np == nil {
			return structs.Conflict("node %q holds the claim of allocation %q on volume %q of plugin %q: "+
				"the node cannot stop reporting that plugin while it holds its claims (their releases run through it): %s",
				n.ID, c.AllocID, volName(v.Namespace, v.ID), v.PluginID, drainFirst)
		}
		if np.Endpoint == "" || np.ExternalNodeID == "" || c.TargetPath == "" {
			return nil // nothing probed: no capability reported
		}
		if staged := c.StagingPath != ""; staged != np.StageUnstage {
			was := "published it without staging"
			if staged {
				was = "staged it at " + c.StagingPath
			}
			return structs.Conflict("node %q holds the claim of allocation %q on volume %q, which %s: "+
				"plugin %q cannot report STAGE_UNSTAGE_VOLUME %v there while it holds claims of that plugin: %s",
				n.ID, c.AllocID, volName(v.Namespace, v.ID), was, v.PluginID, np.StageUnstage, drainFirst)
		}
		return nil
	})
}

// validatePluginUnderClaims refuses a plugin registration without
// PUBLISH_UNPUBLISH_VOLUME while a held claim of one of its volumes holds
// a controller attachment it made: its release must send
// ControllerUnpublishVolume to the plugin's controller. A plugin that
// gains the capability is accepted: claims that attached nothing record
// it, and their releases send nothing.
func validatePluginUnderClaims(snap *Snapshot, p *structs.Plugin) error {
	if p.Capabilities.PublishUnpublish {
		return nil
	}
	old, err := snap.PluginByID(nil, p.ID)
	if err != nil || old == nil || !old.Capabilities.PublishUnpublish {
		// Not a change: claims committed under it attached nothing
		// (recordPublish, recordLegacyPublish), and no volume is read.
		return err
	}
	vols, err := snap.VolumesByPlugin(nil, p.ID)
	if err != nil {
		return err
	}
	for _, v := range vols {
		for _, id := range v.ClaimIDs() {
			c := v.Claims[id]
			if c == nil || c.State == structs.ClaimReadyToFree || c.Unattached || c.Attached() == structs.EffectNone {
				continue
			}
			return structs.Conflict("plugin %q: the claim of allocation %q on volume %q holds a controller attachment to node %q (external node ID %q): "+
				"the plugin cannot be registered without PUBLISH_UNPUBLISH_VOLUME (a controller endpoint that advertises it) while its volumes hold attachments, "+
				"or their releases could not detach them: keep the controller endpoint, or drain the claims first (stop their allocations and let them be released)",
				p.ID, c.AllocID, volName(v.Namespace, v.ID), c.NodeID, c.ExternalNodeID)
		}
	}
	return nil
}

// validateClaimMachine refuses a new claim c of v on node n while another
// claim of the volume on the same machine has a NodeUnstageVolume in doubt
// (structs.Volume.UnstagingFor): the unmount may still be running, and a
// path staged and published now would be removed under the allocation; or
// a ControllerUnpublishVolume in doubt (structs.Volume.DetachingFor): the
// disk would be detached under the new claim's mount; or while another
// claim there may hold the volume staged at another staging path
// (structs.Volume.StagedElsewhere: a machine back under another node ID
// with another root_dir). c's paths are known once the claim path has
// prepared them, so the last check refuses the write-ahead record, before
// any CSI call.
func validateClaimMachine(v *structs.Volume, n *structs.Node, c *structs.Claim) error {
	probe := *c
	if probe.ExternalNodeID == "" {
		if np := n.Plugins[v.PluginID]; np != nil {
			probe.ExternalNodeID = np.ExternalNodeID
		}
	}
	if o := v.DetachingFor(&probe); o != nil {
		return structs.Conflict("volume %q: the release of allocation %q on node %q (the same machine) sent ControllerUnpublishVolume to external node ID %q and %s: "+
			"the storage may still be detaching the disk, and a claim published there now would lose it under its mount when that ends. "+
			"The claim is refused until the release's next attempt has the driver's answer; retry the claim then, or claim on another node",
			volName(v.Namespace, v.ID), o.AllocID, o.NodeID, o.ExternalNodeID, whyInDoubt(o))
	}
	if o := v.StagedElsewhere(&probe); o != nil {
		return structs.Conflict("volume %q: the claim of allocation %q on node %q (the same machine) staged it at %s; a claim on node %q would stage it again at %s, "+
			"a second staging path on one machine, one of which no release would unstage. "+
			"The claim is refused until that claim is released; or register node %q with the root_dir that claim's path is under",
			volName(v.Namespace, v.ID), o.AllocID, o.NodeID, o.StagingPath, c.NodeID, c.StagingPath, c.NodeID)
	}
	o := v.UnstagingFor(&probe)
	if o == nil {
		return nil
	}
	return structs.Conflict("volume %q: the release of allocation %q on node %q (the same machine) sent NodeUnstageVolume of %s and %s: "+
		"the driver may still be unmounting it, and a claim published there now would lose its staging path when that ends. "+
		"The claim is refused until the release's next attempt has the driver's answer; retry the claim then, or claim on another node",
		volName(v.Namespace, v.ID), o.AllocID, o.NodeID, o.StagingPath, whyInDoubt(o))
}

// validateClaimLeftovers refuses a claim c of v on node n while a
// leftover of the same disk (plugin and external volume ID) may still hold
// it: its force-deregistered claim had not reached controller-detached, so
// the disk may still be attached, staged or published where it ran, with
// nothing left to release it but the operator. On that machine (external
// node ID, else node ID) a claim would stage and publish beside mounts the
// operator is about to remove, or under a NodeUnstage or
// ControllerUnpublish that was sent with no answer and may still run
// (Leftover.InDoubt); on another machine, a single-node volume would be
// attached a second time (a multi-attach disk takes it). The operator
// cleans the leftover up, clears it, and the claim goes through.
func validateClaimLeftovers(snap *Snapshot, v *structs.Volume, n *structs.Node, c *structs.Claim) error {
	left, err := snap.Leftovers(nil)
	if err != nil {
		return err
	}
	ext := c.ExternalNodeID
	if ext == "" {
		if np := n.Plugins[v.PluginID]; np != nil {
			ext = np.ExternalNodeID
		}
	}
	for _, l := range left {
		if l.PluginID != v.PluginID || l.ExternalID != v.ExternalID || l.State.Order() >= structs.ClaimControllerDetached.Order() {
			continue
		}
		same := l.NodeID == c.NodeID
		if l.ExternalNodeID != "" && ext != "" {
			same = l.ExternalNodeID == ext
		}
		var why string
		switch {
		case same && l.InDoubt != "":
			why = fmt.Sprintf("the release of allocation %q on node %q (the same machine) had sent %s with no answer: it may still run there and would end under a claim published now",
				l.AllocID, l.NodeID, l.InDoubt)
		case same:
			why = fmt.Sprintf("its claim by allocation %q on node %q (the same machine) had reached %s: the disk may still be staged or published there, and cleaning that up would pull it from under a claim published now",
				l.AllocID, l.NodeID, l.State)
		case v.AccessMode.SingleNode():
			why = fmt.Sprintf("its claim by allocation %q on node %q had reached %s: the disk may still be attached there, and volume %q is %s (a second machine would attach it too)",
				l.AllocID, l.NodeID, l.State, volName(v.Namespace, v.ID), v.AccessMode)
		default:
			continue
		}
		return structs.Conflict("volume %q: disk %q was force-deregistered and left leftover %q: %s. "+
			"Clean the leftover up on the storage side, then `volhost volume leftovers -clear %s` and retry the claim",
			volName(v.Namespace, v.ID), v.ExternalID, l.ID, why, l.ID)
	}
	return nil
}

// whyInDoubt says why release o's step is in doubt, for a refusal: its
// answer has not arrived, or its last attempt failed (a retry may be
// running at the driver).
func whyInDoubt(o *structs.Claim) string {
	if e := o.LastError; e != nil {
		return "its last attempt failed: " + e.Error()
	}
	return "its answer has not arrived"
}
