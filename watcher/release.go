package watcher

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// Step names, as they appear in ClaimError.Step and AdapterRequest.Step.
const (
	StepNodeUnpublish       = abi.StepNodeUnpublish
	StepNodeUnstage         = abi.StepNodeUnstage
	StepControllerUnpublish = abi.StepControllerUnpublish
	StepPolicy              = "policy"
	StepAdapter             = attach.StepAdapter
)

// Stuck reasons. They are stable strings so a volume already stuck for the
// same reason is not re-marked on every attempt (no log spam, the
// reference system's hashicorp/nomad#25349).
const (
	ReasonFatal       = "driver error classified fatal"
	ReasonMaxAttempts = "max attempts reached"
	ReasonStuckAfter  = "failing for longer than stuck_after"
	ReasonHeld        = "held by its release policy for longer than stuck_after"
)

// pass is one assessment of one volume: a read of the volume and of what
// its claims refer to, one policy decision, then the release steps of the
// claims that are due.
type pass struct {
	w      *Watcher
	ref    structs.VolumeRef
	v      *structs.Volume
	now    time.Time
	term   uint64                    // leadership term the pass runs under (0: unfenced)
	claims map[string]*structs.Claim // working copies; ready-to-free ones leave
	allocs map[string]*structs.Alloc // nil value: gone
	nodes  map[string]*structs.Node  // nil value: gone
	// twoMachines are node IDs under which claims of the volume resolve
	// to different nodes (stepNode: published on different machines), a
	// state from before a reused node ID was refused: their node steps
	// wait, for a node ID names one node here.
	twoMachines map[string][2]string
	plugin      *structs.Plugin // nil: not registered
	policy      Policy
	adapter     attach.Adapter
	log         hclog.Logger

	wake     time.Time // earliest time this volume wants another pass
	released []string  // alloc IDs whose claims reached ready-to-free
}

// load reads the volume and everything its claims refer to; (nil, nil) when
// the volume is gone.
func (w *Watcher) load(ref structs.VolumeRef) (*pass, error) {
	p, err := readPass(w.deps.State, ref, w.clock.Now())
	if err != nil || p == nil {
		return nil, err
	}
	w.mu.Lock()
	p.term = w.term
	if st := w.vols[ref]; st != nil {
		st.read = max(st.read, p.v.ModifyIndex)
	}
	w.mu.Unlock()
	p.w = w
	p.policy, p.adapter = w.mods.PolicyFor(p.v), w.mods.AdapterFor(p.v)
	p.log = w.logger.With("namespace", ref.Namespace, "volume", ref.ID)
	return p, nil
}

// readPass reads the volume and everything its claims refer to, as of
// now; (nil, nil) when the volume is gone. The views a pass hands modules
// are built from what it reads (ModuleViews reads the same way).
func readPass(st StateReader, ref structs.VolumeRef, now time.Time) (*pass, error) {
	v, err := st.Volume(ref.Namespace, ref.ID)
	if err != nil {
		return nil, fmt.Errorf("read volume %s/%s: %w", ref.Namespace, ref.ID, err)
	}
	if v == nil {
		return nil, nil
	}
	p := &pass{
		ref:    ref,
		v:      v,
		now:    now,
		claims: make(map[string]*structs.Claim, len(v.Claims)),
		allocs: make(map[string]*structs.Alloc, len(v.Claims)),
		nodes:  make(map[string]*structs.Node),
	}
	for id, c := range v.Claims {
		if c.State == structs.ClaimReadyToFree {
			continue // the store removes these in the same write
		}
		p.claims[id] = c.Copy()
		if p.allocs[c.AllocID], err = st.Alloc(c.AllocID); err != nil {
			return nil, fmt.Errorf("read allocation %q: %w", c.AllocID, err)
		}
		n, err := stepNode(st, v, c)
		if err != nil {
			return nil, err
		}
		first, seen := p.nodes[c.NodeID]
		if !seen {
			p.nodes[c.NodeID] = n
			continue
		}
		if nodeName(first) != nodeName(n) {
			if p.twoMachines == nil {
				p.twoMachines = map[string][2]string{}
			}
			p.twoMachines[c.NodeID] = [2]string{nodeName(first), nodeName(n)}
		}
	}
	if len(p.claims) > 0 {
		if p.plugin, err = st.Plugin(v.PluginID); err != nil {
			return nil, fmt.Errorf("read plugin %s: %w", v.PluginID, err)
		}
	}
	return p, nil
}

// assess runs one pass over a volume and returns when it next wants one
// (zero: only when something changes).
func (w *Watcher) assess(ctx context.Context, ref structs.VolumeRef) (time.Time, error) {
	p, err := w.load(ref)
	if err != nil || p == nil {
		return time.Time{}, err
	}
	if done, err := p.escapeHatch(ctx); done || err != nil {
		return time.Time{}, err
	}
	var due []*structs.Claim
	for _, c := range p.sortedClaims() {
		if p.releasable(c) && !c.NextAttempt.After(p.now) {
			due = append(due, c)
		}
	}
	if len(due) > 0 {
		verdicts, err := p.decide(ctx, due)
		if err != nil {
			return time.Time{}, err
		}
		// Faults on claims that were not due (a release decided for a
		// live allocation) are recorded too: they are the evidence.
		for _, c := range p.sortedClaims() {
			vd, ok := verdicts[c.AllocID]
			if !ok {
				continue
			}
			if vd.fault == nil && c.NextAttempt.After(p.now) {
				continue
			}
			if err := p.act(ctx, c, vd); err != nil {
				return time.Time{}, err
			}
		}
	}
	if err := p.clearStuck(ctx); err != nil {
		return time.Time{}, err
	}
	return p.nextWake(), nil
}

// escapeHatch force-deregisters a volume stuck for AutoForceAfter whose
// allocations are all terminal or gone (opt-in). The store answers with the
// attachments left behind and keeps them as leftovers: the reference system
// drops them silently (hashicorp/nomad#8641).
func (p *pass) escapeHatch(ctx context.Context) (bool, error) {
	cfg := p.w.cfg
	s := p.v.Stuck
	if !cfg.AutoForceDeregister || s == nil || p.now.Sub(s.Since) < cfg.AutoForceAfter {
		return false, nil
	}
	for _, c := range p.claims {
		if !p.releasable(c) {
			return false, nil
		}
	}
	leftovers, err := p.w.deps.Writer.ForceDeregister(ctx, &structs.VolumeDeregisterRequest{
		Namespace: p.ref.Namespace, VolumeID: p.ref.ID, Force: true, Reason: "escape-hatch", Time: p.now,
	})
	if err != nil {
		return false, fmt.Errorf("auto force-deregister %s/%s: %w", p.ref.Namespace, p.ref.ID, err)
	}
	if m, ok := p.w.metrics.(AutoForceMetrics); ok {
		m.AutoForceDeregistered()
	}
	p.log.Warn("stuck volume force-deregistered by the escape hatch", "stuck_since", s.Since,
		"reason", s.Reason, "leftovers", len(leftovers))
	return true, nil
}

// releasable: the claim's allocation is terminal on its client, or gone.
// This is the host's safety rule, checked whatever a policy says.
func (p *pass) releasable(c *structs.Claim) bool {
	a := p.allocs[c.AllocID]
	return a == nil || a.ClientStatus.Terminal()
}

func (p *pass) sortedClaims() []*structs.Claim {
	out := make([]*structs.Claim, 0, len(p.claims))
	for _, c := range p.claims {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AllocID < out[j].AllocID })
	return out
}

func (p *pass) wakeAt(t time.Time) {
	if p.wake.IsZero() || t.Before(p.wake) {
		p.wake = t
	}
}

// nextWake is the earliest NextAttempt of a releasable claim still here, or
// a policy's requested re-look.
func (p *pass) nextWake() time.Time {
	for _, c := range p.claims {
		if p.releasable(c) && c.NextAttempt.After(p.now) {
			p.wakeAt(c.NextAttempt)
		}
	}
	return p.wake
}

// verdict is the validated policy answer for one claim.
type verdict struct {
	action     abi.Action
	retryAfter time.Duration
	reason     string
	fault      *structs.ClaimError // non-nil: a module fault, do not release
	hostHold   bool                // the host, not the policy, keeps the claim waiting
}

// decide asks the volume's policy once and validates every decision against
// the host's rules: a release of a claim whose allocation is pending or
// running is unsafe; a decision for an allocation not in the request, a
// duplicate or an unknown action is bad output. Faults fail closed.
func (p *pass) decide(ctx context.Context, due []*structs.Claim) (map[string]verdict, error) {
	out := make(map[string]verdict, len(p.claims))
	failAll := func(fe *structs.ClaimError) map[string]verdict {
		for _, c := range due {
			e := *fe
			out[c.AllocID] = verdict{fault: &e}
		}
		return out
	}
	resp, err := p.policy.DecideRelease(ctx, p.policyRequest())
	if err == nil && resp == nil {
		err = errors.New("policy returned no response")
	}
	if err == nil && resp.Error != "" {
		err = attach.GuestError(resp.Error)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // step-down, not the module's fault
		}
		return failAll(attach.ModuleError(p.policy, StepPolicy, err)), nil
	}
	seen := make(map[string]int, len(resp.Decisions))
	for _, d := range resp.Decisions {
		if _, ok := p.claims[d.AllocID]; !ok {
			// A policy that confuses claims cannot be trusted with the
			// others of this volume either.
			return failAll(attach.Fault(p.policy, StepPolicy, attach.FaultBadOutput,
				"decision for allocation %q, which has no claim in the request", d.AllocID)), nil
		}
		seen[d.AllocID]++
	}
	for _, d := range resp.Decisions {
		c := p.claims[d.AllocID]
		if seen[d.AllocID] > 1 {
			out[d.AllocID] = verdict{fault: attach.Fault(p.policy, StepPolicy, attach.FaultBadOutput,
				"%d decisions for allocation %q", seen[d.AllocID], d.AllocID)}
			continue
		}
		vd := verdict{action: d.Action, reason: d.Reason, retryAfter: p.w.clampRetry(d.RetryAfterMs)}
		switch d.Action {
		case abi.ActionWait:
		case abi.ActionRelease, abi.ActionReleaseSkipNode:
			if !p.releasable(c) {
				vd = verdict{fault: attach.Fault(p.policy, StepPolicy, attach.FaultUnsafe,
					"decided to release the claim of allocation %q, which is %s", d.AllocID, p.allocStatus(c.AllocID))}
				break
			}
			// Skipping the node step leaves whatever is mounted there
			// mounted: only for a node that cannot be reached (down or
			// gone) or is fenced, never a ready one, whatever a module
			// says; and a node that only missed heartbeats waits for a
			// fence (a timeout is no proof it is off, Kubernetes #120344).
			switch {
			case d.Action != abi.ActionReleaseSkipNode || p.fence(c.NodeID) != nil:
			case p.nodeReachable(c.NodeID):
				vd = verdict{fault: attach.Fault(p.policy, StepPolicy, attach.FaultUnsafe,
					"decided to skip the node step of allocation %q on node %q, which is %s", d.AllocID, c.NodeID, p.nodes[c.NodeID].Status)}
			case p.heartbeatLost(c.NodeID) && (c.TargetPath != "" || c.StagingPath != ""):
				// Held unless the adapter confirms a fence (confirmfence.go).
				var err error
				if vd, err = p.lostNodeVerdict(ctx, c, vd); err != nil {
					return nil, err
				}
			}
			if vd.action == abi.ActionRelease && vd.fault == nil && p.fence(c.NodeID) == nil {
				if hold, held := p.unansweredHold(c); held {
					vd = hold
				}
			}
		default:
			vd = verdict{fault: attach.Fault(p.policy, StepPolicy, attach.FaultBadOutput,
				"unknown action %d for allocation %q", d.Action, d.AllocID)}
		}
		out[d.AllocID] = vd
	}
	// A due claim without a decision waits: no release without a decision.
	return out, nil
}

// nodeReachable: the node is registered and ready. A node the policy
// may skip is one that is down or gone.
func (p *pass) nodeReachable(id string) bool {
	n := p.nodes[id]
	return n != nil && n.Status == structs.NodeReady
}

// act carries out one validated verdict.
func (p *pass) act(ctx context.Context, c *structs.Claim, vd verdict) error {
	switch {
	case vd.fault != nil:
		return p.fail(ctx, c, vd.fault, 0)
	case vd.action == abi.ActionWait:
		if vd.retryAfter > 0 {
			p.wakeAt(p.now.Add(vd.retryAfter))
		}
		if p.releasable(c) {
			return p.hold(ctx, c, vd)
		}
		return nil
	}
	// A fenced node is attested off: its node steps are skipped whatever
	// the policy's release says (a call there could only time out).
	return p.release(ctx, c, vd.action == abi.ActionReleaseSkipNode || p.fence(c.NodeID) != nil)
}

// hold records that the policy keeps a releasable claim waiting: who, why
// and until when, shown by `volume status`. It writes only when a hold
// starts or its holder changes, or its reason changed (a policy's: when
// the claim was last written holdReasonEvery ago or more), so a policy answering "wait"
// on every pass is not a loop of log writes. A hold counts toward
// stuck_after like a run of failures: a policy can delay a release, it
// cannot hide a claim that never releases (module answers are bounded by
// the host).
func (p *pass) hold(ctx context.Context, c *structs.Claim, vd verdict) error {
	h := &structs.ClaimHold{Reason: vd.reason, Since: p.now}
	if n, ok := p.policy.(attach.Named); ok && !vd.hostHold {
		h.Module, h.ModuleVersion = n.ModuleName(), n.ModuleVersion()
	}
	if vd.hostHold {
		h.Module = HostHolder
	}
	if vd.retryAfter > 0 {
		h.Until = p.now.Add(vd.retryAfter)
	}
	if old := c.Hold; old != nil {
		h.Since = old.Since
		if old.Module == h.Module && old.ModuleVersion == h.ModuleVersion {
			switch next := c.ModifyTime.Add(holdReasonEvery); {
			case old.Reason == h.Reason:
				h = old // unchanged: no write
			case !vd.hostHold && p.now.Before(next):
				// Only a policy's reason changed, and recently written:
				// the hold write is itself a change of the volume, which
				// runs a pass, so a reason new on every call (grace-policy
				// 1.0.0 named the allocation's age) was a log write per
				// pass without end. Write it on a later pass. The host's
				// own holds change their reason only when it asks a fence
				// module again, on its own schedule.
				h = old
				p.wakeAt(next)
			}
		}
	}
	if h != c.Hold {
		c.Hold = h
		c.ModifyTime = p.now
		if err := p.checkpoint(ctx, c, stepFlags{}); err != nil {
			return err
		}
	}
	stuckAt := h.Since.Add(p.w.cfg.StuckAfter)
	if p.now.Before(stuckAt) {
		p.wakeAt(stuckAt)
		return nil
	}
	return p.markStuck(ctx, c, ReasonHeld, &structs.ClaimError{
		Kind: structs.ErrorModule, Step: StepPolicy, Module: h.Module, ModuleVersion: h.ModuleVersion,
		Message: fmt.Sprintf("held since %s: %s", h.Since.UTC().Format(time.RFC3339), h.Reason),
	})
}

// holdReasonEvery is how often a hold whose holder is unchanged is written
// again for a new reason alone: a reason should say why, not when (the
// hold's since and until do), and one that changes on every call costs one
// log write per claim per holdReasonEvery, not one per pass.
const holdReasonEvery = time.Minute

// heldTooLong: a policy has held the claim for stuck_after or more.
func (p *pass) heldTooLong(c *structs.Claim) bool {
	return c.Hold != nil && p.now.Sub(c.Hold.Since) >= p.w.cfg.StuckAfter
}

// release drives one claim from its checkpointed state to ready-to-free,
// stopping at the first failed step (recorded on the claim). A claim already
// past a step (a crash, a leader change) resumes where it stands. The error
// is only for a failed store write or a cancelled context.
func (p *pass) release(ctx context.Context, c *structs.Claim, skipNode bool) error {
	if c.State == structs.ClaimPublishing && p.w.locks.Busy(p.ref) {
		// The claim path may be publishing this very claim (its record is
		// written ahead of its calls): its NodePublish and this release's
		// NodeUnpublish must not race on one target. Once it lets the
		// volume go the claim is taken, removed, or left publishing for
		// this release; no claim path takes up the claim of an ended
		// allocation again (host/state refuses it).
		p.wakeAt(p.now.Add(p.w.backoff(1)))
		return nil
	}
	if c.State.Order() < structs.ClaimControllerDetached.Order() && c.Attempts >= p.w.cfg.AbandonAfter {
		if reason := p.abandonReason(c); reason != "" {
			if err := p.abandon(ctx, c, reason); err != nil {
				return err
			}
		}
	}
	for {
		var ok bool
		var err error
		switch c.State {
		case structs.ClaimPublishing, structs.ClaimTaken:
			// A publishing claim's calls may have attached, staged and
			// published (structs.Claim.Staged and friends: unknown): its
			// release re-sends every step, each idempotent by the CSI spec.
			ok, err = p.nodeStep(ctx, c, skipNode)
		case structs.ClaimNodeDetached:
			ok, err = p.controllerStep(ctx, c)
		case structs.ClaimControllerDetached:
			// Nothing can fail here but the write; a last error on a
			// controller-detached claim is an abandonment note, kept so
			// the store's transition event can say why.
			ok, err = true, p.advance(ctx, c, structs.ClaimReadyToFree, c.LastError, stepFlags{})
		case structs.ClaimReadyToFree:
			return nil
		default:
			return p.fail(ctx, c, &structs.ClaimError{Kind: structs.ErrorPrecondition,
				Message: fmt.Sprintf("unknown claim state %q", c.State)}, 0)
		}
		if err != nil || !ok {
			return err
		}
	}
}

// nodeStep: NodeUnpublishVolume, then NodeUnstageVolume when the node plugin
// stages and no other claim of the volume on that machine still needs the
// staging path (structs.Volume.NeedsStaging). Skipped when the policy says
// the node is unreachable.
func (p *pass) nodeStep(ctx context.Context, c *structs.Claim, skip bool) (bool, error) {
	node := p.nodes[c.NodeID]
	var np *structs.NodePlugin
	if node != nil {
		np = node.Plugins[p.v.PluginID]
	}
	published := c.TargetPath != "" || c.StagingPath != ""
	var flags stepFlags
	var nodeCSI attach.NodeRelease
	var acks []string           // keyed steps whose outcome the advance commits
	rec, recorded := ctx, false // the context of the writes that record what the node did
	fence := p.fence(c.NodeID)
	if !skip && fence != nil {
		skip = true // attested off (Detach, a policy release)
	}
	switch {
	case published && p.twoMachines[c.NodeID] != [2]string{}:
		// Which machine the steps would reach, and whose fence or
		// status would skip them, would depend on which claim was read
		// first: each claim's mounts stay where they are.
		m := p.twoMachines[c.NodeID]
		return false, p.fail(ctx, c, p.precondition(StepNodeUnpublish,
			"the claims of this volume on node %q were published on two machines (now %s and %s): their node steps wait; "+
				"force-deregister the volume (`volhost volume deregister -force`): its leftovers name each claim's machine", c.NodeID, m[0], m[1]), 0)
	case skip:
	case !published:
		// Nothing was published on the node (it had no node endpoint
		// when claimed): there is nothing to undo there.
	case node == nil:
		return false, p.fail(ctx, c, p.precondition(StepNodeUnpublish,
			"node %q is gone and the policy did not skip the node step", c.NodeID), 0)
	case np == nil || np.Endpoint == "":
		return false, p.fail(ctx, c, p.precondition(StepNodeUnpublish,
			"node %q has no endpoint for plugin %q", c.NodeID, p.v.PluginID), 0)
	case !np.Answering():
		// Every path to a node step comes here (a policy's release is
		// held before, unansweredHold; an operator's detach is not).
		return false, p.fail(ctx, c, p.precondition(StepNodeUnpublish, "%s", unansweredWait(c.NodeID, p.v.PluginID, np)), 0)
	default:
		var fe *structs.ClaimError
		if nodeCSI, fe = p.nodeService(node, StepNodeUnpublish); fe != nil {
			return false, p.fail(ctx, c, fe, 0)
		}
		// A claim whose NodeUnpublish is already committed resumes at the
		// unstage: the unpublish is never repeated (exactly one NodeUnpublish
		// per claim, even across a node agent's restart).
		unpublished := false
		if c.TargetPath != "" && !c.NodeUnpublished {
			resp, fe := p.adapt(ctx, c, StepNodeUnpublish)
			if fe != nil {
				return false, p.failAdapt(ctx, c, fe)
			}
			err := p.callCSI(attach.WithStepKey(ctx, attach.Key(p.ref, c, StepNodeUnpublish)), func(ctx context.Context) error {
				return nodeCSI.NodeUnpublishVolume(ctx, np.Endpoint, attach.Requests{Claim: c, Answer: resp}.NodeUnpublish())
			})
			if ok, err := p.csiOutcome(ctx, c, StepNodeUnpublish, err); !ok || err != nil {
				return false, err
			}
			unpublished = true
			acks = append(acks, attach.Key(p.ref, c, StepNodeUnpublish))
			// From here on the pass records what the node did: a pass
			// cancelled now (the watcher disabled, a step-down under
			// way) must still commit the unpublish, or the next pass
			// repeats it (exactly one NodeUnpublish per claim).
			rctx, cancel := recording(ctx)
			defer cancel()
			rec, recorded = rctx, true
		}
		// The staging path is shared by the volume's claims on this
		// machine: unstage only when no other one needs it,
		// as committed state says right now, with the claim path held
		// off until the checkpoint is written (attach.VolumeLocks).
		// Whether the claim staged is its own record (it staged only
		// when the plugin stages), never the node's registration today:
		// a node re-registered with the capability off would otherwise
		// leave the path staged and have the disk detached under it.
		if c.StagingPath != "" {
			unlock, err := p.w.locks.Lock(rec, p.ref)
			if err != nil {
				return false, err
			}
			defer unlock()
			last, err := p.lastOnNodeCommitted(c)
			if err != nil {
				return false, err
			}
			if last {
				if unpublished {
					// Commit the unpublish before the unstage runs, so
					// no retry sends it twice, and so that committed
					// state says the unstage may have run from here on
					// (structs.Claim.Staged: unknown), whatever becomes
					// of its answer: a claim path then stages again
					// instead of publishing from a path that may be
					// empty. Only here: a claim with no unstage to
					// follow keeps one write per step.
					if err := p.recordUnpublished(rec, c); err != nil {
						return false, err
					}
					attach.Ack(nodeCSI, acks...)
					acks = nil
				}
				resp, fe := p.adapt(ctx, c, StepNodeUnstage)
				if fe != nil {
					return false, p.failAdapt(ctx, c, fe)
				}
				if err := p.markResent(ctx, c, c.UnstageInDoubt()); err != nil {
					return false, err
				}
				// The unstage, a new destructive call, runs under the pass's
				// own context: a cancelled pass records, it does not act.
				err := p.callCSI(attach.WithStepKey(ctx, attach.Key(p.ref, c, StepNodeUnstage)), func(ctx context.Context) error {
					return nodeCSI.NodeUnstageVolume(ctx, np.Endpoint, attach.Requests{Claim: c, Answer: resp}.NodeUnstage())
				})
				if ok, err := p.csiOutcome(ctx, c, StepNodeUnstage, err); !ok || err != nil {
					return false, err
				}
				flags.unstaged = true
				acks = append(acks, attach.Key(p.ref, c, StepNodeUnstage))
			}
		}
	}
	c.SkipNodeStep = skip
	forced := skip && fence != nil && published
	if forced {
		c.FenceReason = fence.Source + ": " + fence.Reason
	}
	if flags.unstaged && !recorded {
		// The unstage is done too: its record must not be lost either.
		rctx, cancel := recording(ctx)
		defer cancel()
		rec = rctx
	}
	if err := p.advance(rec, c, structs.ClaimNodeDetached, nil, flags); err != nil {
		return false, err
	}
	attach.Ack(nodeCSI, acks...)
	if forced {
		p.forcedDetach(fence)
		p.log.Warn("node steps skipped: node is fenced", "alloc", c.AllocID, "node", c.NodeID,
			"fenced_by", fence.Source, "reason", fence.Reason)
	}
	return true, nil
}

// recordTimeout bounds a write that records a CSI step already done.
const recordTimeout = 10 * time.Second

// recording is the context for committing what a CSI call that succeeded
// did: not cancelled with the pass, bounded, and, like every checkpoint,
// refused by the FSM unless the pass's leadership term is still current.
// A deposed leader's record fails there, and the next leader repeats the
// step (idempotent by the CSI spec); a pass merely cancelled while its
// leader stays does not lose what it did.
func recording(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
}

// recordUnpublished checkpoints that c's NodeUnpublish succeeded, with its
// NodeUnstage next. The success ends a run of failures, as advance does.
func (p *pass) recordUnpublished(ctx context.Context, c *structs.Claim) error {
	c.NodeUnpublished = true
	c.Attempts = 0
	c.FirstFailure = time.Time{}
	c.NextAttempt = time.Time{}
	c.LastError = nil
	c.Hold = nil
	c.ModifyTime = p.now
	if err := p.checkpoint(ctx, c, stepFlags{}); err != nil {
		return err
	}
	p.log.Debug("claim node-unpublished; unstage next", "alloc", c.AllocID, "node", c.NodeID)
	return nil
}

// lastOnNodeCommitted: no other claim of the volume on c's machine still
// needs the staging path (structs.Volume.NeedsStaging), read from
// committed state, not from the claims this pass loaded: a claim taken
// there since then needs it (a release pass racing a new claim on the
// same node). The machine, not the
// node ID: one machine registered under two node IDs shares the path. A
// claim that staged nothing (taken while its node had no node endpoint)
// does not keep a path another claim staged from being unstaged. Call it
// holding the volume's lock.
func (p *pass) lastOnNodeCommitted(c *structs.Claim) (bool, error) {
	v, err := p.committed()
	if err != nil {
		return false, err
	}
	return v.NeedsStaging(c) == nil, nil
}

// sharedOnNodeCommitted: another claim of the volume on c's machine holds
// the controller attachment or may (structs.Volume.HoldsAttachment), read
// from committed state. The attachment is per (volume, external node ID),
// so it is left to the last such claim: ControllerUnpublishVolume then
// runs once, after every node step on that machine (CSI spec;
// hashicorp/nomad#24130: unpublish while still in use, or twice). Call it holding the
// volume's lock.
func (p *pass) sharedOnNodeCommitted(c *structs.Claim) (bool, error) {
	v, err := p.committed()
	if err != nil {
		return false, err
	}
	return v.HoldsAttachment(c) != nil, nil
}

// committed re-reads the volume from the store.
func (p *pass) committed() (*structs.Volume, error) {
	v, err := p.w.deps.State.Volume(p.ref.Namespace, p.ref.ID)
	if err != nil {
		return nil, fmt.Errorf("re-read volume %s/%s: %w", p.ref.Namespace, p.ref.ID, err)
	}
	if v == nil {
		return nil, structs.NotFound("volume", p.ref.Namespace+"/"+p.ref.ID)
	}
	return v, nil
}

// controllerStep: ControllerUnpublishVolume when the plugin publishes and
// this is the last claim of the volume on the node, always with a node ID.
func (p *pass) controllerStep(ctx context.Context, c *structs.Claim) (bool, error) {
	if c.Unattached {
		// Its publish attached nothing (structs.Claim.Unattached): there
		// is nothing to detach, whatever the plugin advertises now.
		return true, p.advance(ctx, c, structs.ClaimControllerDetached, nil, stepFlags{})
	}
	if p.plugin == nil {
		return false, p.fail(ctx, c, p.precondition(StepControllerUnpublish,
			"plugin %q is not registered", p.v.PluginID), 0)
	}
	if !p.plugin.Capabilities.PublishUnpublish {
		// The claim recorded an attachment, and the store refuses a
		// plugin registration that drops the capability under such
		// claims (older rows get the record at restore), so only a
		// registration racing the claim's commit gets here: skipping
		// the detach could leave the disk attached, sending it could
		// fail at a controller that is not there; neither is guessed.
		return false, p.fail(ctx, c, p.precondition(StepControllerUnpublish,
			"the claim recorded a controller attachment but plugin %q does not advertise PUBLISH_UNPUBLISH_VOLUME: "+
				"register the plugin with its controller endpoint, or force-deregister the volume and check the attachment by hand", p.v.PluginID), 0)
	}
	resp, fe := p.adapt(ctx, c, StepControllerUnpublish)
	if fe != nil {
		return false, p.failAdapt(ctx, c, fe)
	}
	if resp.NodeID == "" {
		if p.nodes[c.NodeID] == nil {
			// Nomad's behaviour: with the node gone and no external node
			// ID known, nothing can address the attachment; abandon the
			// claim rather than loop (hashicorp/nomad#12346), and say so.
			note := p.precondition(StepControllerUnpublish,
				"node %q is gone and no external node ID is known: claim abandoned without ControllerUnpublishVolume", c.NodeID)
			note.Time = p.now
			p.log.Warn("abandoning claim", "alloc", c.AllocID, "node", c.NodeID, "reason", note.Message)
			return true, p.advance(ctx, c, structs.ClaimControllerDetached, note, stepFlags{})
		}
		// Never send an empty node ID: GCE PD rejects it and the
		// reference system loops on "missing external node ID" after
		// every election (hashicorp/nomad#25349).
		return false, p.fail(ctx, c, p.precondition(StepControllerUnpublish,
			"no external node ID for node %q", c.NodeID), 0)
	}
	if p.plugin.ControllerEndpoint == "" {
		return false, p.fail(ctx, c, p.precondition(StepControllerUnpublish,
			"plugin %q has no controller endpoint", p.plugin.ID), 0)
	}
	secrets, fe := attach.Secrets(p.adapter, p.v, resp.SecretKeys)
	if fe != nil {
		return false, p.failAdapt(ctx, c, fe)
	}
	release, err := p.w.ctl.acquire(ctx, p.plugin.ID)
	if err != nil {
		return false, err
	}
	// The attachment is per (volume, node): decide from committed state,
	// with the claim path held off until the checkpoint is written, that
	// no other claim on the node still needs it (a release pass racing a
	// new claim on the same node).
	unlock, err := p.w.locks.Lock(ctx, p.ref)
	if err != nil {
		release()
		return false, err
	}
	defer unlock()
	if shared, err := p.sharedOnNodeCommitted(c); err != nil || shared {
		release()
		if err != nil {
			return false, err
		}
		return true, p.advance(ctx, c, structs.ClaimControllerDetached, nil, stepFlags{})
	}
	if err := p.markResent(ctx, c, c.DetachInDoubt()); err != nil {
		release()
		return false, err
	}
	err = p.callCSI(ctx, func(ctx context.Context) error {
		return p.w.deps.Controller.ControllerUnpublishVolume(ctx, p.plugin.ControllerEndpoint,
			attach.Requests{Claim: c, Answer: resp, Secrets: secrets}.ControllerUnpublish())
	})
	release()
	if ok, err := p.csiOutcome(ctx, c, StepControllerUnpublish, err); !ok || err != nil {
		return false, err
	}
	return true, p.advance(ctx, c, structs.ClaimControllerDetached, nil, stepFlags{controllerUnpublished: true})
}

// callCSI runs one CSI call under CSITimeout, once this server has
// confirmed it still leads the pass's term (attach.Call, the claim path's
// fence too). A failed confirmation is returned as an *attach.NotSent,
// which ends the pass without touching the claim.
func (p *pass) callCSI(ctx context.Context, call func(context.Context) error) error {
	return attach.Call(ctx, p.w.deps.Leadership, p.term, p.w.cfg.CSITimeout, call)
}

// csiOutcome turns a CSI call's error into the step's outcome through the
// adapter: ok when the step counts as done; otherwise the failure has been
// recorded on the claim. The error is only for a store write or step-down.
func (p *pass) csiOutcome(ctx context.Context, c *structs.Claim, step string, err error) (bool, error) {
	if err == nil {
		return true, nil
	}
	if ctx.Err() != nil {
		// Leadership lost: the call was cancelled on purpose; the claim
		// stays as checkpointed and the next leader resumes it.
		return false, ctx.Err()
	}
	var ns *attach.NotSent
	if errors.As(err, &ns) {
		return false, err
	}
	code, msg := grpcCode(err)
	ce := &structs.ClaimError{Kind: structs.ErrorCSI, Step: step, Code: uint32(code), CodeName: code.String(), Message: msg}
	// VolumeID is the driver's (external) volume ID: the adapter speaks
	// the driver's language.
	cr, cerr := p.adapter.ClassifyError(ctx, &abi.ClassifyRequest{
		Step:     step,
		Code:     uint32(code),
		Message:  msg,
		Attempts: uint32(c.Attempts),
		PluginID: p.v.PluginID,
		VolumeID: p.v.ExternalID,
	})
	if cerr == nil && cr == nil {
		cerr = errors.New("adapter returned no classification")
	}
	if cerr == nil && cr.Error != "" {
		cerr = attach.GuestError(cr.Error)
	}
	if cerr == nil && (cr.Outcome < abi.OutcomeDone || cr.Outcome > abi.OutcomeFatal) {
		cerr = attach.BadOutput(fmt.Sprintf("unknown outcome %d", cr.Outcome))
	}
	if cerr != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		// Fail closed: an unclassified error is retried, keeping the
		// driver's code next to the module fault.
		me := attach.ModuleError(p.adapter, step, cerr)
		me.Code, me.CodeName = ce.Code, ce.CodeName
		me.Message = fmt.Sprintf("classify: %s; driver error: %s", me.Message, msg)
		return false, p.fail(ctx, c, me, 0)
	}
	switch cr.Outcome {
	case abi.OutcomeDone:
		// A module may make the host more careful, never declare a failed
		// detach done: the claim would move on, and the volume be freed,
		// with the disk still attached.
		me := attach.Fault(p.adapter, step, attach.FaultUnsafe, "classified the failed %s (%s: %s) as done; a failed step is never done",
			step, code, msg)
		me.Code, me.CodeName = ce.Code, ce.CodeName
		return false, p.fail(ctx, c, me, 0)
	case abi.OutcomeFatal:
		ce.Fatal = true
	}
	return false, p.fail(ctx, c, ce, p.w.clampRetry(cr.RetryAfterMs))
}

// grpcCode keeps the driver's gRPC code; a bare context error (a deadline
// hit before the call left) gets the code gRPC would have given it.
func grpcCode(err error) (codes.Code, string) {
	if s, ok := status.FromError(err); ok {
		return s.Code(), s.Message()
	}
	if s := status.FromContextError(err); s.Code() != codes.Unknown {
		return s.Code(), err.Error()
	}
	return codes.Unknown, err.Error()
}

// subject is what claim c's step is about, as this pass read it.
func (p *pass) subject(c *structs.Claim) attach.Subject {
	return attach.Subject{Volume: p.v, Claim: c, Node: p.nodes[c.NodeID], Plugin: p.plugin, Now: p.now}
}

// adapt asks the adapter for a step's request fields (attach.Subject.Adapt:
// the claim path's bounds too).
func (p *pass) adapt(ctx context.Context, c *structs.Claim, step string) (*abi.AdapterResponse, *structs.ClaimError) {
	return p.subject(c).Adapt(ctx, p.adapter, step)
}

// failAdapt records an adapter fault, unless the context ended (step-down).
func (p *pass) failAdapt(ctx context.Context, c *structs.Claim, fe *structs.ClaimError) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return p.fail(ctx, c, fe, 0)
}

// advance checkpoints a successful step: the whole claim, one log entry.
// Success ends a run of failures. note, when set, is kept as the claim's
// last error (an abandoned claim says why).
//
// A claim advanced to controller-detached is freed in the same write
// (structs.ClaimCheckpointRequest.Free; BenchmarkAgentReleaseNative
// reports the raft entries per claim): nothing runs between
// the two states, so their own log entries bought a log append, an FSM
// transaction and a watcher pass per claim and no safety. A claim found at
// controller-detached (written by an older leader) still gets its own
// ready-to-free checkpoint (release).
func (p *pass) advance(ctx context.Context, c *structs.Claim, to structs.ClaimState, note *structs.ClaimError, flags stepFlags) error {
	flags.free = to == structs.ClaimControllerDetached
	c.State = to
	c.Attempts = 0
	c.FirstFailure = time.Time{}
	c.NextAttempt = time.Time{}
	c.LastError = note
	c.Hold = nil
	c.ModifyTime = p.now
	if err := p.checkpoint(ctx, c, flags); err != nil {
		return err
	}
	p.log.Debug("claim transition", "alloc", c.AllocID, "node", c.NodeID, "state", to)
	if flags.free {
		to, c.State = structs.ClaimReadyToFree, structs.ClaimReadyToFree
		p.log.Debug("claim transition", "alloc", c.AllocID, "node", c.NodeID, "state", to)
	}
	if to == structs.ClaimReadyToFree {
		delete(p.claims, c.AllocID)
		p.released = append(p.released, c.AllocID)
		p.w.metrics.ClaimReleased(p.ref, c.AllocID)
	}
	return nil
}

// fail records a failed attempt on the claim with ONE checkpoint (attempts,
// first failure, backoff, last error), never a loop of log writes, and marks
// the volume stuck when the claim has failed too often or too long, or the
// error is fatal. The claim stays in its last state.
func (p *pass) fail(ctx context.Context, c *structs.Claim, e *structs.ClaimError, retryAfter time.Duration) error {
	c.Attempts++
	if c.FirstFailure.IsZero() {
		c.FirstFailure = p.now
	}
	e.Time = p.now
	prev := c.LastError
	c.LastError = e
	c.Hold = nil // releasing now: no policy holds it
	d := retryAfter
	if d <= 0 {
		d = p.w.backoff(c.Attempts)
	}
	if e.Fatal && d < p.w.cfg.BackoffMax {
		d = p.w.cfg.BackoffMax
	}
	c.NextAttempt = p.now.Add(d)
	c.ModifyTime = p.now
	if err := p.checkpoint(ctx, c, stepFlags{}); err != nil {
		return err
	}
	p.w.metrics.AttemptFailed(p.ref, c.AllocID, e)
	p.wakeAt(c.NextAttempt)
	logf := p.log.Debug
	if warnWorthy(prev, e, c.Attempts) {
		logf = p.log.Warn
	}
	logf("release attempt failed", "alloc", c.AllocID, "node", c.NodeID, "state", c.State,
		"error", e.Error(), "attempts", c.Attempts, "next_attempt", c.NextAttempt)

	reason := ""
	switch {
	case e.Fatal:
		reason = ReasonFatal
	case p.w.cfg.MaxAttempts > 0 && c.Attempts >= p.w.cfg.MaxAttempts:
		reason = ReasonMaxAttempts
	case p.now.Sub(c.FirstFailure) >= p.w.cfg.StuckAfter:
		reason = ReasonStuckAfter
	}
	if reason == "" {
		return nil
	}
	return p.markStuck(ctx, c, reason, e)
}

// warnWorthy says whether a failed attempt is logged at WARN: the first
// attempt, any attempt whose error differs from the previous one (another
// step, code, module fault or message), and attempts 2, 4, 8, 16, ...
// of the same error, so a claim that keeps failing stays visible at the
// default level without a line per retry. Before, only the first of a
// run reached WARN, and a later, different failure was hidden at DEBUG.
func warnWorthy(prev, e *structs.ClaimError, attempts int) bool {
	if prev == nil || attempts <= 1 {
		return true
	}
	if prev.Kind != e.Kind || prev.Step != e.Step || prev.Code != e.Code || prev.Fault != e.Fault || prev.Message != e.Message {
		return true
	}
	return attempts&(attempts-1) == 0
}

// markStuck marks the volume stuck for reason, once per reason (no log
// spam, hashicorp/nomad#25349).
func (p *pass) markStuck(ctx context.Context, c *structs.Claim, reason string, e *structs.ClaimError) error {
	if p.v.Stuck != nil && p.v.Stuck.Reason == reason {
		return nil
	}
	s := &structs.Stuck{
		Since:    p.now,
		Reason:   reason,
		AllocID:  c.AllocID,
		NodeID:   c.NodeID,
		Module:   e.Module,
		Fault:    e.Fault,
		Code:     e.Code,
		CodeName: e.CodeName,
		Attempts: c.Attempts,
	}
	if p.v.Stuck != nil {
		s.Since = p.v.Stuck.Since // stuck since the first mark, for the escape hatch's "after"
	}
	if _, err := p.w.deps.Writer.MarkStuck(ctx, &structs.VolumeStuckRequest{
		Namespace: p.ref.Namespace, VolumeID: p.ref.ID, Stuck: s,
	}); err != nil {
		return fmt.Errorf("mark volume %s/%s stuck: %w", p.ref.Namespace, p.ref.ID, err)
	}
	p.setStuck(s)
	p.w.metrics.VolumeStuck(p.ref, s)
	p.log.Warn("volume stuck", "reason", reason, "alloc", c.AllocID, "node", c.NodeID,
		"error", e.Error(), "attempts", c.Attempts)
	return nil
}

// setStuck records the mark this pass wrote on its own shallow copy of the
// volume: p.v may be the state store's object, shared with readers (the
// API encoding it), and must never be written in place.
func (p *pass) setStuck(s *structs.Stuck) {
	v := *p.v
	v.Stuck = s
	p.v = &v
}

// clearStuck lifts the stuck mark once no remaining claim is failing.
func (p *pass) clearStuck(ctx context.Context) error {
	if p.v.Stuck == nil {
		return nil
	}
	for _, c := range p.claims {
		if c.Attempts > 0 || (p.releasable(c) && p.heldTooLong(c)) {
			return nil
		}
	}
	if _, err := p.w.deps.Writer.MarkStuck(ctx, &structs.VolumeStuckRequest{
		Namespace: p.ref.Namespace, VolumeID: p.ref.ID,
	}); err != nil {
		return fmt.Errorf("clear stuck volume %s/%s: %w", p.ref.Namespace, p.ref.ID, err)
	}
	p.setStuck(nil)
	p.w.metrics.VolumeStuck(p.ref, nil)
	p.log.Info("volume no longer stuck")
	return nil
}

// stepFlags say which per-(volume, node) CSI calls a transition ran, so
// the store can refuse the checkpoint if a committed claim contradicts the
// decision (structs.ClaimCheckpointRequest).
type stepFlags struct {
	unstaged              bool
	controllerUnpublished bool
	// free: the claim goes on to ready-to-free in the same write (advance).
	free bool
}

func (p *pass) checkpoint(ctx context.Context, c *structs.Claim, flags stepFlags) error {
	_, err := p.w.deps.Writer.CheckpointClaim(ctx, &structs.ClaimCheckpointRequest{
		Namespace: p.ref.Namespace, VolumeID: p.ref.ID, Claim: c.Copy(), Term: p.term,
		Unstaged: flags.unstaged, ControllerUnpublished: flags.controllerUnpublished, Free: flags.free,
	})
	if err != nil {
		return fmt.Errorf("checkpoint claim %s of %s/%s at %s: %w", c.AllocID, p.ref.Namespace, p.ref.ID, c.State, err)
	}
	return nil
}

// precondition is a missing prerequisite of a step (endpoint, node ID).
func (p *pass) precondition(step, format string, args ...any) *structs.ClaimError {
	return &structs.ClaimError{Kind: structs.ErrorPrecondition, Step: step, Message: fmt.Sprintf(format, args...)}
}

func (p *pass) allocStatus(id string) string {
	if a := p.allocs[id]; a != nil {
		return string(a.ClientStatus)
	}
	return attach.StatusGone
}

// allocView: TerminalAgeMs counts from the allocation's last modification,
// which is when it became terminal (the client's last status update). It is
// at least 1 ms: 0 means "not terminal or unknown" on the wire, and a policy
// must not read an allocation that ended this millisecond as one of unknown
// age (grace-policy releases those at once; the grace-policy example's
// tests).
func (p *pass) allocView(id string) abi.AllocView {
	av := abi.AllocView{ID: id, ClientStatus: p.allocStatus(id)}
	if a := p.allocs[id]; a != nil && a.ClientStatus.Terminal() && !a.ModifyTime.IsZero() {
		av.TerminalAgeMs = max(p.now.Sub(a.ModifyTime).Milliseconds(), 1)
	}
	return av
}

// policyRequest shows the policy every claim of the volume (sorted, so a
// decision is a pure function of the volume), their allocations and nodes.
func (p *pass) policyRequest() *abi.PolicyRequest {
	req := &abi.PolicyRequest{NowUnixMs: p.now.UnixMilli(), Volume: attach.VolumeView(p.v)}
	seenNode := make(map[string]bool)
	for _, c := range p.sortedClaims() {
		req.Claims = append(req.Claims, attach.ClaimView(c))
		req.Allocs = append(req.Allocs, p.allocView(c.AllocID))
		if !seenNode[c.NodeID] {
			seenNode[c.NodeID] = true
			req.Nodes = append(req.Nodes, attach.NodeView(p.v.PluginID, c.NodeID, p.nodes[c.NodeID], p.now, false))
		}
	}
	return req
}
