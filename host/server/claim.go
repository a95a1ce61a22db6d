package server

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// ClaimVolume publishes a volume for an allocation and records the claim.
// Every refusal (capacity, access mode, unknown IDs, a live claim by the same
// allocation) is checked before the first CSI call.
//
// The claim is written ahead of its first CSI call, in state publishing
// (host/structs publishing.go), with the external node ID and paths its
// calls will use: from then on a record accounts for whatever they may
// attach, stage or publish, whether this leader dies mid-publish or a
// rollback stops half way. Publish confirms the same record taken. A
// publish that fails is rolled back newest step first, stopping at the
// first undo that fails or loses its answer (the CSI spec orders the
// undos: no NodeUnstage under a target that may be published, no
// ControllerUnpublish under a path that may be staged). A retry that took
// up a publishing record rolls back nothing (an earlier run may have
// published its target). A rollback that undid every step removes the
// record it wrote; otherwise the record
// stays, counted against the volume, and is released by the watcher in
// the spec's order once its allocation ends, or finished by a retry.
//
// The request is idempotent: the same allocation, volume, node and mode
// again answers the recorded taken claim without any CSI call, and takes
// up a publishing one (a retry after a leader died mid-publish or after a
// refused claim): every publish step is re-sent (idempotent by the CSI
// spec) and the record confirmed taken. That is what makes retrying safe
// after an ErrOutcomeUnknown answer.
//
// It runs only on a leader whose step-up is complete, under that
// leadership term: every CSI call is preceded by ConfirmLeader and every
// record carries the term, which the FSM checks (the failover fence).
func (s *Server) ClaimVolume(ctx context.Context, req *structs.ClaimRequest) (*structs.Claim, error) {
	if req == nil {
		return nil, structs.Invalid("", "empty claim request")
	}
	if req.Namespace == "" {
		req.Namespace = "default"
	}
	if s.ready != nil {
		if err := s.ready(ctx); err != nil {
			return nil, err
		}
	}
	term, err := s.readyTerm(ctx)
	if err != nil {
		return nil, err
	}
	unlock, err := s.locks.Lock(ctx, structs.VolumeRef{Namespace: req.Namespace, ID: req.VolumeID})
	if err != nil {
		return nil, fmt.Errorf("claim: waiting for volume %q: %w", volumeKey(req.Namespace, req.VolumeID), err)
	}
	defer unlock()

	snap := s.store.Snapshot()
	vol, err := snap.VolumeByID(nil, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, structs.NotFound("volume", volumeKey(req.Namespace, req.VolumeID))
	}
	prev := vol.Claims[req.AllocID]
	if prev != nil && prev.State == structs.ClaimTaken && sameClaim(prev, req, vol) {
		return prev.Copy(), nil
	}
	now := s.clock.Now()
	claim := &structs.Claim{
		AllocID:        req.AllocID,
		NodeID:         req.NodeID,
		Mode:           req.Mode,
		AccessMode:     req.AccessMode,
		AttachmentMode: req.AttachmentMode,
		State:          structs.ClaimPublishing,
		CreateTime:     now,
		ModifyTime:     now,
	}
	claim.DefaultModes(vol)
	record := &structs.VolumeClaimRequest{Namespace: vol.Namespace, VolumeID: vol.ID, Claim: claim, Term: term}
	// A publishing record of this allocation is taken up (written again
	// under this term, the same publish) or refused by the store's rule.
	resumed := prev != nil && prev.State == structs.ClaimPublishing
	pre := record
	if resumed {
		// Checked now with the record's own IDs and paths (the store
		// compares them with this run's when the record is written), so
		// a retry the store refuses (an ended allocation: the watcher may
		// be releasing the claim) sends nothing, not even a probe.
		c := claim.Copy()
		c.ExternalNodeID, c.StagingPath, c.TargetPath = prev.ExternalNodeID, prev.StagingPath, prev.TargetPath
		pre = &structs.VolumeClaimRequest{Namespace: vol.Namespace, VolumeID: vol.ID, Claim: c, Term: term}
	}
	if err := snap.Validate(structs.VolumeClaimType, pre); err != nil {
		return nil, err
	}
	node, err := snap.NodeByID(nil, claim.NodeID)
	if err != nil {
		return nil, err
	}
	plugin, err := snap.PluginByID(nil, vol.PluginID)
	if err != nil {
		return nil, err
	}
	if node == nil || plugin == nil {
		// Validate checked both; a concurrent deregister raced us.
		return nil, structs.Conflict("node %q or plugin %q was removed while claiming", claim.NodeID, vol.PluginID)
	}

	pub := &publisher{s: s, vol: vol, node: node, plugin: plugin, claim: claim, term: term}
	if err := pub.prepare(ctx); err != nil {
		return nil, err
	}
	if !resumed && !s.writesAhead() {
		return s.claimPublishFirst(ctx, pub, record)
	}
	key := volumeKey(vol.Namespace, vol.ID)
	index, _, err := s.log.Apply(ctx, structs.VolumeClaimType, record)
	if err != nil {
		// Nothing was sent. A record whose commit is unconfirmed may
		// exist: a retry takes it up, and the watcher releases it if the
		// allocation ends first (it accounts for calls never made).
		return nil, fmt.Errorf("claim of volume %q by allocation %q: %w", key, claim.AllocID, err)
	}
	if err := pub.publish(ctx, index); err != nil {
		// A retry that took up a record rolls back nothing: the earlier
		// run's calls (a leader that died mid-publish, a rollback that
		// stopped) may have published the target, and this run cannot
		// know, so its NodeUnstage or ControllerUnpublish could land
		// under that mount (CSI spec: NodeUnstage after every
		// NodeUnpublish, ControllerUnpublish after every node step). The
		// record accounts for all of it either way.
		if !resumed && pub.rollback(ctx) {
			pub.remove(ctx, index)
		} else {
			if pub.unstageInDoubt {
				pub.recordUnstageInDoubt(ctx, index)
			}
			s.logger.Warn("refused claim left publishing for the watcher to release once its allocation ends (or for a retry to finish)",
				"volume", key, "alloc", claim.AllocID, "node", claim.NodeID, "resumed", resumed)
		}
		return nil, err
	}
	taken := claim.Copy()
	taken.State = structs.ClaimTaken
	taken.ModifyTime = s.clock.Now()
	confirm := &structs.VolumeClaimRequest{Namespace: vol.Namespace, VolumeID: vol.ID, Claim: taken, Term: term}
	if _, _, err := s.log.Apply(ctx, structs.VolumeClaimType, confirm); err != nil {
		// The publishing record stays and accounts for the publish: a
		// retry (here or on the next leader) re-sends it and confirms it;
		// if the allocation ends first, the watcher releases it. Nothing
		// is undone here: the claim may be confirmed (outcome unknown),
		// and a deposed leader may not call the plugins anyway.
		s.logger.Warn("claim published but not confirmed taken; kept publishing for a retry", "volume", key,
			"alloc", claim.AllocID, "node", claim.NodeID, "error", err)
		return nil, fmt.Errorf("claim of volume %q by allocation %q: %w", key, claim.AllocID, err)
	}
	s.logger.Info("volume claimed", "volume", key, "alloc", claim.AllocID,
		"node", claim.NodeID, "plugin", plugin.ID, "mode", claim.Mode, "resumed", resumed)
	return taken, nil
}

// stepUpWait bounds how long a claim waits for a new leader's step-up
// (barrier and StepUpDelay) before answering 503.
const stepUpWait = 10 * time.Second

// readyTerm is the leadership term the claim runs under. A leader still
// stepping up (its barrier, then StepUpDelay while a deposed leader's calls
// drain) makes the claim wait rather than fail: the claim path is delayed
// like the watcher (the failover fence), and a client sees a slower answer
// instead of a 503 after every failover.
func (s *Server) readyTerm(ctx context.Context) (uint64, error) {
	if term := s.log.ReadyTerm(); term != 0 {
		return term, nil
	}
	if s.log.IsLeader() {
		wctx, cancel := context.WithTimeout(ctx, stepUpWait)
		err := s.log.WaitForLeader(wctx)
		cancel()
		if term := s.log.ReadyTerm(); err == nil && term != 0 {
			return term, nil
		}
	}
	return 0, fmt.Errorf("claim: this server is not a leader ready for leader work (stepping up, transferring or following): %w", structs.ErrNoLeader)
}

// sameClaim: prev, a recorded claim, is what req asks for (a retry).
func sameClaim(prev *structs.Claim, req *structs.ClaimRequest, vol *structs.Volume) bool {
	access, attach := req.AccessMode, req.AttachmentMode
	if access == "" {
		access = vol.AccessMode
	}
	if attach == "" {
		attach = vol.AttachmentMode
	}
	return prev.State == structs.ClaimTaken && prev.NodeID == req.NodeID && prev.Mode == req.Mode &&
		prev.AccessMode == access && prev.AttachmentMode == attach
}

// publisher runs the CSI calls of one claim and remembers how to undo them.
type publisher struct {
	s      *Server
	vol    *structs.Volume
	node   *structs.Node
	plugin *structs.Plugin
	claim  *structs.Claim
	term   uint64
	undo   []func(context.Context) error
	// unstageUndo is the position (1-based; 0: none) in undo of the
	// NodeUnstage that undoes this claim's NodeStage, and unstageInDoubt
	// says the rollback stopped there with the answer lost: the unmount
	// may still be running (recordUnstageInDoubt).
	unstageUndo    int
	unstageInDoubt bool

	// Set by prepare, before the claim is written ahead.
	np      *structs.NodePlugin // the node's plugin, nil or without endpoint: no node steps
	nodeCSI attach.NodeSteps
	// reqs builds each step's request and its undo's (attach.Requests,
	// the release's builder too) from the claim's IDs and paths and the
	// adapter's answer.
	reqs attach.Requests
}

// attachRecorded is whether the claim path sends ControllerPublishVolume:
// only when the publishing record committed at index says the claim
// attaches (not Unattached). The store sets Unattached from the plugin it
// holds at commit, and a plugin that dropped PUBLISH_UNPUBLISH_VOLUME
// between this run's read and the commit would otherwise get an attachment
// that no release undoes (a release skips ControllerUnpublish for an
// unattached claim). A record no longer as committed (a release began on
// it) stops the publish before any call.
func (p *publisher) attachRecorded(index uint64) (bool, error) {
	v, err := p.s.store.Snapshot().VolumeByID(nil, p.vol.Namespace, p.vol.ID)
	if err != nil {
		return false, err
	}
	var c *structs.Claim
	if v != nil {
		c = v.Claims[p.claim.AllocID]
	}
	if c == nil || c.ModifyIndex != index || c.State != structs.ClaimPublishing {
		return false, structs.Conflict("the publishing record of allocation %q on volume %q changed after it was written (a release began): nothing sent",
			p.claim.AllocID, volumeKey(p.vol.Namespace, p.vol.ID))
	}
	return p.plugin.Capabilities.PublishUnpublish && !c.Unattached, nil
}

// call runs one CSI call of the claim path once leadership of its term is
// confirmed (the failover fence: a deposed or paused leader sends nothing).
func (p *publisher) call(ctx context.Context, f func(context.Context) error) error {
	return attach.Call(ctx, p.s.log, p.term, 0, f)
}

// prepare decides everything the claim's calls will name, before any is
// sent and before the claim is written ahead: where its node steps go,
// the adapter's answer (the external node ID every release step of the
// claim will name), the secrets, and the staging and target paths. Each
// refusal here leaves nothing to undo.
func (p *publisher) prepare(ctx context.Context) error {
	np := p.node.Plugins[p.plugin.ID]
	if np != nil && np.Endpoint != "" {
		// Checked before the first CSI call: no controller attachment
		// for a node whose steps cannot be run now.
		node, err := p.nodeSteps()
		if err != nil {
			return err
		}
		if err := p.checkMachine(ctx, np); err != nil {
			return err
		}
		p.np, p.nodeCSI = np, node
	}
	adapter := p.s.modules.AdapterFor(p.vol)
	adapted, err := p.adapt(ctx, adapter)
	if err != nil {
		return err
	}
	p.claim.ExternalNodeID = adapted.NodeID
	secrets, fe := attach.Secrets(adapter, p.vol, adapted.SecretKeys)
	if fe != nil {
		// The release's fault too (attach.Secrets): no call without the secret.
		return fmt.Errorf("csi adapter for volume %q: %w", p.vol.ID, fe)
	}
	if p.plugin.Capabilities.PublishUnpublish && adapted.NodeID == "" {
		// GCE PD and others reject an empty node ID; never send one (node_id is optional in the CSI spec, not in drivers).
		return structs.Invalid("node_id", "no external node ID for node %q and plugin %q: register the node's plugin endpoint", p.node.ID, p.plugin.ID)
	}
	if p.np != nil {
		staging, target := csi.Paths(p.node.RootDir, p.plugin.ID, p.vol.Namespace, p.vol.ID, p.claim.AllocID)
		p.claim.TargetPath = target
		if p.np.StageUnstage {
			p.claim.StagingPath = staging
		}
	}
	p.reqs = attach.Requests{
		Claim: p.claim, Answer: adapted, Secrets: secrets,
		Capability: csi.Capability(p.claim.AccessMode, p.claim.AttachmentMode, p.vol.FSType, p.vol.MountFlags),
	}
	return nil
}

// publish runs the claim's CSI calls, as prepare decided them, once its
// publishing record is committed.
func (p *publisher) publish(ctx context.Context, index uint64) error {
	attach, err := p.attachRecorded(index)
	if err != nil {
		return err
	}
	return p.publishSteps(ctx, attach)
}

// publishSteps runs the claim's CSI calls; attach says whether the first
// is ControllerPublishVolume.
func (p *publisher) publishSteps(ctx context.Context, attach bool) error {
	var err error

	if attach {
		// Whether another claim on the machine already holds the
		// attachment is read before the call: ControllerPublish is
		// idempotent (CSI spec), so it answers OK for an attachment this
		// claim did not make, and that one must never be undone here
		// (a rollback detached a live claim's disk).
		owned := p.vol.HoldsAttachment(p.claim) == nil
		var resp *csipb.ControllerPublishVolumeResponse
		err := p.call(ctx, func(ctx context.Context) (err error) {
			resp, err = p.s.csi.ControllerPublishVolume(ctx, p.plugin.ControllerEndpoint, p.reqs.ControllerPublish())
			return err
		})
		if owned {
			undo := p.reqs.ControllerUnpublish()
			p.undoIfRan(err, func(ctx context.Context) error {
				return p.s.csi.ControllerUnpublishVolume(ctx, p.plugin.ControllerEndpoint, undo)
			})
		}
		if err != nil {
			return fmt.Errorf("controller publish of volume %q on node %q: %w", p.vol.ID, p.node.ID, err)
		}
		p.claim.PublishContext = resp.GetPublishContext()
	}
	if p.np == nil {
		return nil
	}
	np, node := p.np, p.nodeCSI
	if p.claim.StagingPath != "" {
		// Stage once per volume and machine: later claims there reuse it
		// (CSI spec: NodeStageVolume is per volume per node), but only
		// from a claim that certainly staged this path and has not begun
		// to unstage it. A claim whose NodeUnstage may have run (its
		// answer lost), that staged nothing (taken while its node had no
		// node endpoint), or that is still publishing, leaves the path in
		// doubt or empty: stage again, which the CSI spec makes
		// idempotent, rather than publish from an empty directory onto
		// the node's root disk.
		if p.vol.StagedFor(p.claim) == nil {
			// Built after ControllerPublish: it carries its publish context.
			stage := p.reqs.NodeStage()
			err := p.call(ctx, func(ctx context.Context) error {
				return node.NodeStageVolume(ctx, np.Endpoint, stage)
			})
			// Undone only when no other claim on the machine may have a
			// target published from the path (structs.Volume.NeedsStaging):
			// the rollback's NodeUnstage must not pull it from under one.
			if p.vol.NeedsStaging(p.claim) == nil {
				n := len(p.undo)
				undo := p.reqs.NodeUnstage()
				p.undoIfRan(err, func(ctx context.Context) error {
					return node.NodeUnstageVolume(ctx, np.Endpoint, undo)
				})
				if len(p.undo) > n {
					p.unstageUndo = len(p.undo)
				}
			}
			if err != nil {
				return fmt.Errorf("node stage of volume %q on node %q: %w", p.vol.ID, p.node.ID, err)
			}
		}
	}
	publish := p.reqs.NodePublish()
	err = p.call(ctx, func(ctx context.Context) error {
		return node.NodePublishVolume(ctx, np.Endpoint, publish)
	})
	undo := p.reqs.NodeUnpublish()
	p.undoIfRan(err, func(ctx context.Context) error {
		return node.NodeUnpublishVolume(ctx, np.Endpoint, undo)
	})
	if err != nil {
		return fmt.Errorf("node publish of volume %q on node %q: %w", p.vol.ID, p.node.ID, err)
	}
	return nil
}

// undoIfRan adds undo to the rollback when the step it undoes succeeded or
// may have run: a call whose answer was lost (Unavailable, which a node
// agent's stream breaking mid-step answers too, or a deadline) may have
// attached, staged or published. Every undo is idempotent by the CSI spec,
// so undoing a step that did not run is harmless; not undoing one that
// did would leave an attachment or a mount no claim accounts for.
func (p *publisher) undoIfRan(err error, undo func(context.Context) error) {
	if err == nil || answerLost(err) {
		p.undo = append(p.undo, undo)
	}
}

// answerLost: the call's answer did not arrive, so it may have run.
func answerLost(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// checkMachine asks a direct-mode node's plugin, which this server dials,
// which machine it is now, before anything is attached for it: the
// controller attachment goes to the external node ID the node registered
// with, and the node steps to the plugin's machine, so a registration the
// plugin contradicts (its instance replaced, its endpoint now reaching
// another machine) would attach one machine and mount on another, or
// stage a second path for the volume on a machine registered under two
// node IDs. A node agent's plugin is node-local: its agent reports it at
// every hello, and RELIABILITY says what the host cannot know of an agent
// that reports another machine's ID.
func (p *publisher) checkMachine(ctx context.Context, np *structs.NodePlugin) error {
	if p.node.Agent {
		return nil
	}
	// Through the fence like every other call of the claim's term.
	var probed *structs.NodePlugin
	err := p.call(ctx, func(ctx context.Context) (err error) {
		probed, err = p.s.csi.ProbeNode(ctx, np.Endpoint)
		return err
	})
	if err != nil {
		return fmt.Errorf("probing node %q's plugin %q before publishing: %w", p.node.ID, p.plugin.ID, err)
	}
	if probed.ExternalNodeID != np.ExternalNodeID || probed.StageUnstage != np.StageUnstage {
		return structs.Conflict("node %q's plugin %q now answers external node ID %q (stage_unstage %t), but the node is registered with %q (stage_unstage %t): "+
			"its instance was replaced or its endpoint reaches another machine; register the node again before claiming there",
			p.node.ID, p.plugin.ID, probed.ExternalNodeID, probed.StageUnstage, np.ExternalNodeID, np.StageUnstage)
	}
	return nil
}

// nodeSteps is where the claim's node steps go: the node's agent when it
// registered through one (its endpoints are node-local: never dialled
// from here), else this server in direct mode.
func (p *publisher) nodeSteps() (attach.NodeSteps, error) {
	a, viaAgent := attach.AgentOf(p.s.agents, p.node)
	switch {
	case !viaAgent:
		return p.s.node, nil
	case a == nil:
		return nil, structs.Conflict("the node agent of node %q is not connected to this server: the claim cannot be published there now", p.node.ID)
	}
	return a, nil
}

// rollback undoes the publish steps that ran or may have run, newest
// first, and reports whether every one was undone. It stops at the first
// undo that fails or loses its answer: the CSI spec orders the undos as
// it orders a release (NodeUnstage only after every NodeUnpublish of the
// staging path, ControllerUnpublish only after every node step on the
// machine), and an undo that may not have run leaves the ones after it
// unsafe: a NodeUnstage under a target that may still be published, a
// ControllerUnpublish that detaches a disk under a mount. What is left is
// accounted to the claim's publishing record, which the watcher releases
// in that order once the allocation ends.
//
// It runs on a context detached from the caller's cancellation (a client
// that hung up must not leave a half-made attachment) but with its own
// deadline.
func (p *publisher) rollback(ctx context.Context) bool {
	ctx = context.WithoutCancel(ctx)
	for i := len(p.undo) - 1; i >= 0; i-- {
		if err := p.call(ctx, p.undo[i]); err != nil {
			p.unstageInDoubt = i+1 == p.unstageUndo && answerLost(err)
			p.s.logger.Error("rolling back a refused claim stopped at an undo that failed; its publishing record stays for the watcher to release",
				"volume", volumeKey(p.vol.Namespace, p.vol.ID), "alloc", p.claim.AllocID, "node", p.node.ID,
				"undos_left", i+1, "error", err)
			return false
		}
	}
	return true
}

// remove drops the claim's publishing record, written at index by this
// run, once its rollback undid every step: the store refuses it for any
// other record (host/state validateRemovePublishing). A remove that fails
// leaves the record, which the watcher releases with idempotent steps.
func (p *publisher) remove(ctx context.Context, index uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	_, _, err := p.s.log.Apply(ctx, structs.VolumeClaimRemoveType, &structs.VolumeClaimRemoveRequest{
		Namespace: p.vol.Namespace, VolumeID: p.vol.ID, AllocID: p.claim.AllocID, ModifyIndex: index, Term: p.term,
	})
	if err != nil {
		p.s.logger.Warn("a refused claim was rolled back but its publishing record stays; the watcher releases it once the allocation ends",
			"volume", volumeKey(p.vol.Namespace, p.vol.ID), "alloc", p.claim.AllocID, "error", err)
	}
}

// recordUnstageInDoubt marks the claim's publishing record after its
// rollback stopped at a NodeUnstage whose answer was lost: the unmount may
// still be running on the machine, and a claim staged and published there
// meanwhile would lose its staging path when it ends. The mark is the one
// a release writes before its own NodeUnstage, node_unpublished (true: the
// rollback's NodeUnpublish, newest first, ran before, or the target was
// never published), so claims on the machine wait for the unstage's answer
// (structs.Claim.UnstageInDoubt, checked by the store), a retry of this
// claim does not take the record up (Claim.Resumable), and the watcher,
// once the allocation ends, re-sends the unstage and settles it. A write
// that fails leaves the record as it was, logged.
func (p *publisher) recordUnstageInDoubt(ctx context.Context, index uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	c := p.claim.Copy()
	c.NodeUnpublished = true
	c.ModifyIndex = index // the record this run wrote (host/state validateUnstageInDoubtMark)
	c.ModifyTime = p.s.clock.Now()
	if _, _, err := p.s.log.Apply(ctx, structs.VolumeClaimType, &structs.VolumeClaimRequest{
		Namespace: p.vol.Namespace, VolumeID: p.vol.ID, Claim: c, Term: p.term,
	}); err != nil {
		p.s.logger.Error("a refused claim's rollback lost the answer of its NodeUnstage, and recording that it may still run failed: claims of the volume on the machine do not wait for it",
			"volume", volumeKey(p.vol.Namespace, p.vol.ID), "alloc", p.claim.AllocID, "node", p.node.ID, "error", err)
	}
}

// removeTimeout bounds the write that drops a rolled-back claim's record.
const removeTimeout = 10 * time.Second

// adapt asks the volume's adapter for the publish's request fields, bounded
// as at release (attach.Subject.Adapt): a fault refuses the claim with the
// ClaimError a release would record.
func (p *publisher) adapt(ctx context.Context, adapter attach.Adapter) (*abi.AdapterResponse, error) {
	s := attach.Subject{Volume: p.vol, Claim: p.claim, Node: p.node, Plugin: p.plugin, Now: p.s.clock.Now()}
	resp, fe := s.Adapt(ctx, adapter, abi.StepControllerPublish)
	if fe == nil {
		return resp, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("csi adapter for volume %q: %w", p.vol.ID, err) // the caller gave up, not the module's fault
	}
	return nil, fmt.Errorf("csi adapter for volume %q: %w", p.vol.ID, fe)
}
