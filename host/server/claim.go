package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
)

// ClaimVolume publishes a volume for an allocation and records the claim.
// Every refusal (capacity, access mode, unknown IDs, a live claim by the same
// allocation) is checked before the first CSI call; the claim is written to
// the log only once publish succeeded, and a publish that fails half way is
// rolled back, undoing only what this claim created, so no attachment is
// left that no claim accounts for and none is taken from another claim.
//
// The request is idempotent: the same allocation, volume, node and mode
// again answers the recorded claim without any CSI call. That is what
// makes retrying safe after an ErrOutcomeUnknown answer (the commit could
// not be confirmed; the claim may be recorded, so nothing was undone).
//
// It runs only on a leader whose step-up is complete, under that
// leadership term: every CSI call is preceded by ConfirmLeader and the
// claim record carries the term, which the FSM checks (issue 10 defect 5).
func (s *Server) ClaimVolume(ctx context.Context, req *structs.ClaimRequest) (*structs.Claim, error) {
	if req == nil {
		return nil, structs.Invalid("", "empty claim request")
	}
	if req.Namespace == "" {
		req.Namespace = "default"
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
	if prev := vol.Claims[req.AllocID]; prev != nil && sameClaim(prev, req, vol) {
		return prev.Copy(), nil
	}
	now := s.clock.Now()
	claim := &structs.Claim{
		AllocID:        req.AllocID,
		NodeID:         req.NodeID,
		Mode:           req.Mode,
		AccessMode:     req.AccessMode,
		AttachmentMode: req.AttachmentMode,
		State:          structs.ClaimTaken,
		CreateTime:     now,
		ModifyTime:     now,
	}
	if claim.AccessMode == "" {
		claim.AccessMode = vol.AccessMode
	}
	if claim.AttachmentMode == "" {
		claim.AttachmentMode = vol.AttachmentMode
	}
	record := &structs.VolumeClaimRequest{Namespace: vol.Namespace, VolumeID: vol.ID, Claim: claim, Term: term}
	if err := snap.Validate(structs.VolumeClaimType, record); err != nil {
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
	if err := pub.publish(ctx); err != nil {
		pub.rollback(ctx)
		return nil, err
	}
	if _, _, err := s.log.Apply(ctx, structs.VolumeClaimType, record); err != nil {
		if errors.Is(err, structs.ErrOutcomeUnknown) {
			// The claim may be committed: undoing its publish would take
			// the volume from a workload that holds it (issue 10 defect
			// 3). A retry of the same request finds the claim or makes it.
			s.logger.Warn("claim commit unconfirmed; publish kept for a retry", "volume", volumeKey(vol.Namespace, vol.ID),
				"alloc", claim.AllocID, "node", claim.NodeID, "error", err)
			return nil, fmt.Errorf("claim of volume %q by allocation %q: %w", volumeKey(vol.Namespace, vol.ID), claim.AllocID, err)
		}
		pub.rollback(ctx)
		return nil, err
	}
	s.logger.Info("volume claimed", "volume", volumeKey(vol.Namespace, vol.ID), "alloc", claim.AllocID,
		"node", claim.NodeID, "plugin", plugin.ID, "mode", claim.Mode)
	return claim, nil
}

// stepUpWait bounds how long a claim waits for a new leader's step-up
// (barrier and StepUpDelay) before answering 503.
const stepUpWait = 10 * time.Second

// readyTerm is the leadership term the claim runs under. A leader still
// stepping up (its barrier, then StepUpDelay while a deposed leader's calls
// drain) makes the claim wait rather than fail: the claim path is delayed
// like the watcher (issue 10 defect 5), and a client sees a slower answer
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
}

// call runs one CSI call of the claim path once leadership of its term is
// confirmed (issue 10 defect 5).
func (p *publisher) call(ctx context.Context, f func(context.Context) error) error {
	if err := p.s.log.ConfirmLeader(ctx, p.term); err != nil {
		return fmt.Errorf("not sent: %w", err)
	}
	return f(ctx)
}

func (p *publisher) publish(ctx context.Context) error {
	np := p.node.Plugins[p.plugin.ID]
	var node NodeSteps
	if np != nil && np.Endpoint != "" {
		// Checked before the first CSI call: no controller attachment
		// for a node whose steps cannot be run now.
		var err error
		if node, err = p.nodeSteps(); err != nil {
			return err
		}
	}
	adapted, err := p.adapt(ctx)
	if err != nil {
		return err
	}
	p.claim.ExternalNodeID = adapted.NodeID
	secrets, err := p.vol.SelectSecrets(adapted.SecretKeys)
	if err != nil {
		// The release's rule too: a fault, not a call without the secret.
		return fmt.Errorf("csi adapter for volume %q: %w", p.vol.ID, err)
	}
	capability := csi.Capability(p.claim.AccessMode, p.claim.AttachmentMode, p.vol.FSType, p.vol.MountFlags)
	readonly := p.claim.Mode == structs.ClaimRead

	if p.plugin.Capabilities.PublishUnpublish {
		if adapted.NodeID == "" {
			// GCE PD and others reject an empty node ID; never send one (ANCHORS: CSI spec rules).
			return structs.Invalid("node_id", "no external node ID for node %q and plugin %q: register the node's plugin endpoint", p.node.ID, p.plugin.ID)
		}
		// Whether another claim on the machine already holds the
		// attachment is read before the call: ControllerPublish is
		// idempotent (CSI spec), so it answers OK for an attachment this
		// claim did not make, and that one must never be undone here
		// (issue 10 defect 1).
		owned := p.vol.HoldsAttachment(p.claim) == nil
		var resp *csipb.ControllerPublishVolumeResponse
		err := p.call(ctx, func(ctx context.Context) (err error) {
			resp, err = p.s.csi.ControllerPublishVolume(ctx, p.plugin.ControllerEndpoint, &csipb.ControllerPublishVolumeRequest{
				VolumeId: adapted.VolumeID, NodeId: adapted.NodeID, VolumeCapability: capability,
				Readonly: readonly, Secrets: secrets, VolumeContext: adapted.VolumeContext,
			})
			return err
		})
		if owned {
			p.undoIfRan(err, func(ctx context.Context) error {
				return p.s.csi.ControllerUnpublishVolume(ctx, p.plugin.ControllerEndpoint, &csipb.ControllerUnpublishVolumeRequest{
					VolumeId: adapted.VolumeID, NodeId: adapted.NodeID, Secrets: secrets,
				})
			})
		}
		if err != nil {
			return fmt.Errorf("controller publish of volume %q on node %q: %w", p.vol.ID, p.node.ID, err)
		}
		p.claim.PublishContext = resp.GetPublishContext()
	}
	if np == nil || np.Endpoint == "" {
		return nil
	}
	staging, target := csi.Paths(p.node.RootDir, p.plugin.ID, p.vol.Namespace, p.vol.ID, p.claim.AllocID)
	p.claim.TargetPath = target
	if np.StageUnstage {
		p.claim.StagingPath = staging
		// Stage once per volume and machine: later claims there reuse it
		// (CSI spec: NodeStageVolume is per volume per node), but only
		// from a claim that certainly staged this path and has not begun
		// to unstage it. A claim whose NodeUnstage may have run (its
		// answer lost), or that staged nothing (taken while its node had
		// no node endpoint), leaves the path in doubt or empty: stage
		// again, which the CSI spec makes idempotent, rather than publish
		// from an empty directory onto the node's root disk.
		if p.vol.StagedFor(p.claim) == nil {
			err := p.call(ctx, func(ctx context.Context) error {
				return node.NodeStageVolume(ctx, np.Endpoint, &csipb.NodeStageVolumeRequest{
					VolumeId: adapted.VolumeID, PublishContext: p.claim.PublishContext, StagingTargetPath: staging,
					VolumeCapability: capability, Secrets: secrets, VolumeContext: adapted.VolumeContext,
				})
			})
			// No other claim needs the path (none certainly staged it, and
			// a claim that may have unstaged it is releasing): undoing is safe.
			p.undoIfRan(err, func(ctx context.Context) error {
				return node.NodeUnstageVolume(ctx, np.Endpoint, &csipb.NodeUnstageVolumeRequest{
					VolumeId: adapted.VolumeID, StagingTargetPath: staging,
				})
			})
			if err != nil {
				return fmt.Errorf("node stage of volume %q on node %q: %w", p.vol.ID, p.node.ID, err)
			}
		}
	}
	err = p.call(ctx, func(ctx context.Context) error {
		return node.NodePublishVolume(ctx, np.Endpoint, &csipb.NodePublishVolumeRequest{
			VolumeId: adapted.VolumeID, PublishContext: p.claim.PublishContext, StagingTargetPath: p.claim.StagingPath,
			TargetPath: target, VolumeCapability: capability, Readonly: readonly, Secrets: secrets,
			VolumeContext: adapted.VolumeContext,
		})
	})
	p.undoIfRan(err, func(ctx context.Context) error {
		return node.NodeUnpublishVolume(ctx, np.Endpoint, &csipb.NodeUnpublishVolumeRequest{
			VolumeId: adapted.VolumeID, TargetPath: target,
		})
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

// nodeSteps is where the claim's node steps go: the node's agent when it
// registered through one (its endpoints are node-local: never dialled
// from here), else this server in direct mode.
func (p *publisher) nodeSteps() (NodeSteps, error) {
	if !p.node.Agent {
		return p.s.node, nil
	}
	if p.s.agents != nil {
		if a, ok := p.s.agents.NodeSteps(p.node.ID); ok {
			return a, nil
		}
	}
	return nil, structs.Conflict("the node agent of node %q is not connected to this server: the claim cannot be published there now", p.node.ID)
}

// rollback undoes the publish steps that succeeded, newest first. It runs
// on a context detached from the caller's cancellation (a client that hung
// up must not leave a half-made attachment) but with its own deadline.
func (p *publisher) rollback(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(p.undo) - 1; i >= 0; i-- {
		if err := p.call(ctx, p.undo[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		p.s.logger.Error("rolling back a failed claim left an attachment behind", "volume",
			volumeKey(p.vol.Namespace, p.vol.ID), "alloc", p.claim.AllocID, "node", p.node.ID, "error", err)
	}
}

func (p *publisher) adapt(ctx context.Context) (*abi.AdapterResponse, error) {
	adapter := p.s.modules.AdapterFor(p.vol)
	req := watcher.AdapterRequest(watcher.StepControllerPublish, p.vol, p.claim, p.node, p.plugin, p.s.clock.Now())
	resp, err := adapter.AdaptRequest(ctx, req)
	if err == nil && (resp == nil || resp.VolumeID == "") {
		err = errors.New("adapter answered no volume ID")
	}
	if err == nil {
		err = watcher.CheckAdapterIDs(watcher.StepControllerPublish, p.vol, p.claim, p.node, resp)
	}
	if err != nil {
		return nil, fmt.Errorf("csi adapter for volume %q: %w", p.vol.ID, err)
	}
	return resp, nil
}
