package structs

import "fmt"

// The claim path writes a claim ahead of its first CSI call, in state
// publishing, and confirms it taken once publish succeeded. Until then
// the record is what accounts for whatever its calls may have attached,
// staged or published (Claim.Staged, Published, Attached: unknown): a
// leader that dies mid-publish, or a refused claim whose rollback stopped
// at an undo that failed, leaves a claim the watcher releases in the
// CSI spec's order, never an attachment no claim accounts for.

// DefaultModes gives c the access and attachment modes of its volume v
// where it names none: a claim asks for the volume's own unless it says
// otherwise. The claim path writes its record so, the store fills them on
// commit, and a claim is compared with an earlier record (SamePublish) so;
// one rule, or a claim that named no mode would read as another publish
// than its own record.
func (c *Claim) DefaultModes(v *Volume) {
	if c.AccessMode == "" {
		c.AccessMode = v.AccessMode
	}
	if c.AttachmentMode == "" {
		c.AttachmentMode = v.AttachmentMode
	}
}

// SamePublish reports whether b is the same publish as a: the same
// allocation, node, mode and access, and the same external node ID and
// paths, which are what its release steps will name. Only the same
// publish may confirm a publishing record taken, or resume it after a
// leader change: another one would leave what the record's calls did with
// no claim naming it.
func SamePublish(a, b *Claim) bool {
	return a.AllocID == b.AllocID && a.NodeID == b.NodeID && a.Mode == b.Mode &&
		a.AccessMode == b.AccessMode && a.AttachmentMode == b.AttachmentMode &&
		a.ExternalNodeID == b.ExternalNodeID && a.StagingPath == b.StagingPath && a.TargetPath == b.TargetPath
}

// Resumable reports whether a publishing claim may be taken up again by
// the claim path (a retry of the same request): its release has not begun.
// Once the watcher has recorded a release step on it (NodeUnpublish done,
// or a later state), it only goes forward to ready-to-free.
func (c *Claim) Resumable() bool {
	return c.State == ClaimPublishing && !c.NodeUnpublished
}

// RecordProblem says what makes c an impossible claim record, "" for none:
// the marks a release writes together with a later state cannot sit on a
// publishing claim, and node_unpublished needs a target it unpublished.
// Checked on every claim write of the claim path and on every restored row.
func (c *Claim) RecordProblem() string {
	switch {
	case c.NodeUnpublished && c.TargetPath == "":
		return "node_unpublished is set on a claim with no target path"
	case c.State == ClaimPublishing && c.SkipNodeStep:
		return fmt.Sprintf("skip_node_step is set on a %s claim (it is written with %s)", c.State, ClaimNodeDetached)
	case c.State == ClaimPublishing && c.FenceReason != "":
		return fmt.Sprintf("fence_reason is set on a %s claim (it is written with %s)", c.State, ClaimNodeDetached)
	}
	return ""
}
