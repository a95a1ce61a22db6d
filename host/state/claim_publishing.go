package state

import "github.com/volhost/volhost/host/structs"

// The claim path's write-ahead record (structs.ClaimPublishing): a claim
// is committed publishing before its first CSI call, confirmed taken by
// the same publish, or removed by the run that wrote it once every step
// it ran was undone. These are the store's rules for the two writes that
// follow the record; the record itself is a new claim (validateClaim).

// validateNewClaimMarks: a claim the claim path writes carries none of
// the marks a release writes, and no impossible combination.
func validateNewClaimMarks(c *structs.Claim) error {
	switch {
	case c.NodeUnpublished && c.State != structs.ClaimPublishing:
		return structs.Invalid("claim.node_unpublished", "is written by a release, or by the claim path on its publishing record once its rollback's NodeUnstage lost its answer")
	case c.SkipNodeStep || c.FenceReason != "":
		return structs.Invalid("claim", "skip_node_step and fence_reason are written by a release, not by the claim path")
	}
	if p := c.RecordProblem(); p != "" {
		return structs.Invalid("claim", "%s", p)
	}
	return nil
}

// validateClaimOverPublishing: c is written over old, a publishing claim
// of the same allocation. Only that same publish is accepted (the same
// node, mode, external node ID and paths: its release steps name them),
// with old's release not begun: taken, its confirmation (capacity and the
// other claim checks were made when old was written: it has counted
// against the volume since); or publishing again, a retry taking it up
// after the run that wrote it ended (a leader that died mid-publish, a
// rollback that stopped), checked by the caller like a new claim but for
// capacity. The retry's record is never removed without release
// (validateRemovePublishing): its rollback cannot know what the earlier
// run's calls did.
func validateClaimOverPublishing(v *structs.Volume, old, c *structs.Claim) error {
	name := volName(v.Namespace, v.ID)
	if !old.Resumable() {
		return structs.Conflict("the %s claim of allocation %q on volume %q is being released (NodeUnpublish done): it cannot be taken",
			old.State, c.AllocID, name)
	}
	want := c.Copy()
	want.DefaultModes(v)
	if !structs.SamePublish(old, want) {
		return structs.Conflict("the %s claim of allocation %q on volume %q was written for node %q (external node ID %q, target %q, staging %q): a claim taken over it must be that same publish, not node %q (external node ID %q, target %q, staging %q)",
			old.State, c.AllocID, name, old.NodeID, old.ExternalNodeID, old.TargetPath, old.StagingPath,
			want.NodeID, want.ExternalNodeID, want.TargetPath, want.StagingPath)
	}
	return nil
}

// validateRemovePublishing: only a publishing claim whose release has not
// begun, and only the very record the remover created (its ModifyIndex,
// never written since: not taken up by a retry, no release checkpoint),
// is removed without release. Anything else may account for an attachment,
// a staging path or a target that nothing else would release: a taken
// claim; a record a release step has been recorded on; a record written
// by an earlier run (a leader that died mid-publish), whose calls the
// remover's rollback did not undo.
func validateRemovePublishing(v *structs.Volume, c *structs.Claim, r *structs.VolumeClaimRemoveRequest) error {
	name := volName(v.Namespace, v.ID)
	switch {
	case c.State != structs.ClaimPublishing:
		return structs.Conflict("the claim of allocation %q on volume %q is %s: only a %s claim whose publish was undone is removed without release",
			c.AllocID, name, c.State, structs.ClaimPublishing)
	case !c.Resumable():
		return structs.Conflict("the %s claim of allocation %q on volume %q is being released (NodeUnpublish done): it is not removed without release",
			c.State, c.AllocID, name)
	case r.ModifyIndex != c.ModifyIndex || c.CreateIndex != c.ModifyIndex:
		return structs.Conflict("the %s claim of allocation %q on volume %q is the record of index %d (created at %d), not %d: only the run that created a record, and undid every step it ran, removes it",
			c.State, c.AllocID, name, c.ModifyIndex, c.CreateIndex, r.ModifyIndex)
	}
	return nil
}

// validateUnstageInDoubtMark: c marks v's publishing record of the same
// publish node_unpublished, which the claim path writes once its
// rollback stopped at a NodeUnstage whose answer was lost (the unmount
// may still run: structs.Claim.UnstageInDoubt; the rollback's
// NodeUnpublish ran before it, newest first). Only over the very record
// the run wrote (its ModifyIndex: nothing written on it since), while its
// release has not begun, and for a claim that staged. Nothing else is
// checked: the mark records a doubt, and refusing it because, say, the
// node went down since would lose that.
func validateUnstageInDoubtMark(v *structs.Volume, c *structs.Claim) error {
	name := volName(v.Namespace, v.ID)
	old := v.Claims[c.AllocID]
	switch {
	case old == nil || old.State != structs.ClaimPublishing || !old.Resumable():
		return structs.Conflict("allocation %q has no publishing claim on volume %q whose release has not begun: node_unpublished is not the claim path's to write",
			c.AllocID, name)
	case c.ModifyIndex != old.ModifyIndex:
		return structs.Conflict("the publishing claim of allocation %q on volume %q is the record of index %d, not %d: only the run that wrote it marks it",
			c.AllocID, name, old.ModifyIndex, c.ModifyIndex)
	case c.StagingPath == "":
		return structs.Invalid("claim.node_unpublished", "the claim of allocation %q staged nothing: no unstage to be in doubt", c.AllocID)
	}
	want := c.Copy()
	want.DefaultModes(v)
	if !structs.SamePublish(old, want) {
		return structs.Conflict("the publishing claim of allocation %q on volume %q is another publish than the one marked", c.AllocID, name)
	}
	return nil
}
