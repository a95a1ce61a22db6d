package structs

// A NodeUnstageVolume whose answer was lost may still be running on the
// machine: the caller's deadline ended the call on the CO's side while the
// driver goes on unmounting (or a node agent's stream broke mid-step). A
// claim that stages and publishes there meanwhile has its staging path
// removed under it when the unmount ends, and its allocation writes to the
// node's root disk. Re-staging does not help (it may run before the
// unmount ends), so a new claim of the volume on that machine waits until
// the release has a definitive answer for its unstage (UnstagingFor).

// gRPC codes (google.golang.org/grpc/codes, which this package does not
// import) of an answer that does not say the call is over.
const (
	codeCanceled         = 1
	codeDeadlineExceeded = 4
	codeAborted          = 10 // CSI spec: an operation is pending for the volume
	codeUnavailable      = 14
)

// AnswerLost reports whether a CSI call that answered code may still be
// running, or may have run: its answer says nothing about the driver's
// state (a deadline, a broken connection, a cancellation, or ABORTED for
// an operation still pending on the volume).
func AnswerLost(code uint32) bool {
	switch code {
	case codeCanceled, codeDeadlineExceeded, codeAborted, codeUnavailable:
		return true
	}
	return false
}

// UnstageInDoubt reports whether c's release has sent NodeUnstageVolume
// (or may have: a leader that sent it and died wrote nothing after) with
// no definitive answer yet: the claim is still taken (or publishing: the
// release of a record whose publish never finished), recorded its
// NodeUnpublish done (written before the unstage is sent), and its last
// error, if any, is not a driver's answer to the unstage that says the
// call is over. A module fault or a missing endpoint at a later attempt
// says nothing about an earlier attempt's call, so it leaves the doubt.
func (c *Claim) UnstageInDoubt() bool {
	if !c.beforeNodeSteps() || !c.NodeUnpublished || c.StagingPath == "" {
		return false
	}
	return !c.LastError.answered(stepNodeUnstage)
}

// answered reports whether e is a driver's answer to step that says the
// call is over: a CSI error for that step whose code is not one of a lost
// answer, and with no later call of the step sent since (Resent: the
// release writes that ahead of a retry, so a leader that dies while the
// retry runs leaves the doubt, not the old answer).
func (e *ClaimError) answered(step string) bool {
	return e != nil && e.Kind == ErrorCSI && e.Step == step && !AnswerLost(e.Code) && !e.Resent
}

// UnstagingFor is a claim other than c, on c's machine, whose
// NodeUnstageVolume of the volume is in doubt (Claim.UnstageInDoubt): a
// claim c may not stage or publish there until it is settled.
func (v *Volume) UnstagingFor(c *Claim) *Claim {
	return v.otherClaim(c, func(o *Claim) bool {
		return SameMachine(c, o) && o.UnstageInDoubt()
	})
}

// The same holds for a controller detach: a ControllerUnpublishVolume
// whose answer was lost may still be detaching the disk, and a claim on
// that machine meanwhile finds the attachment still there (its
// ControllerPublish answers OK, idempotent), stages and publishes, and has
// the disk detached under its mount when the detach ends (CSI spec:
// ControllerUnpublish only after every node step on the node). So a new
// claim of the volume on that machine waits until the release has a
// definitive answer for its detach (DetachingFor).

// DetachInDoubt reports whether c's release has sent
// ControllerUnpublishVolume (or may have: the release checkpoints
// node-detached before it sends it, and a leader that sent it and died
// wrote nothing after) with no definitive answer yet: the claim is
// node-detached, attached something at publish (not Unattached), and its
// last error, if any, is not a driver's answer to the detach that says
// the call is over. As for UnstageInDoubt, a later attempt's module fault
// or missing controller says nothing about an earlier attempt's call.
func (c *Claim) DetachInDoubt() bool {
	if c.State != ClaimNodeDetached || c.Unattached {
		return false
	}
	return !c.LastError.answered(stepControllerUnpublish)
}

// DetachingFor is a claim other than c, on c's machine, whose
// ControllerUnpublishVolume of the volume is in doubt (Claim.DetachInDoubt):
// a claim c may not publish there until it is settled.
func (v *Volume) DetachingFor(c *Claim) *Claim {
	return v.otherClaim(c, func(o *Claim) bool {
		return SameMachine(c, o) && o.DetachInDoubt()
	})
}

// StepInDoubt names the destructive call of c's release that may still be
// running on its machine ("" when none): what a force deregister records
// on the claim's leftover (Leftover.InDoubt).
func (c *Claim) StepInDoubt() string {
	switch {
	case c.UnstageInDoubt():
		return "NodeUnstageVolume"
	case c.DetachInDoubt():
		return "ControllerUnpublishVolume"
	}
	return ""
}
