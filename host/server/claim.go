package server

import (
	"context"
	"errors"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
)

// ClaimVolume publishes a volume for an allocation and records the claim.
// Every refusal (capacity, access mode, unknown IDs, a live claim by the same
// allocation) is checked before the first CSI call; the claim is written to
// the log only once publish succeeded, and a publish that fails half way is
// rolled back so no attachment is left that no claim accounts for.
func (s *Server) ClaimVolume(ctx context.Context, req *structs.ClaimRequest) (*structs.Claim, error) {
	if req == nil {
		return nil, structs.Invalid("", "empty claim request")
	}
	if req.Namespace == "" {
		req.Namespace = "default"
	}
	unlock := s.claimLocks.lock(volumeKey(req.Namespace, req.VolumeID))
	defer unlock()

	snap := s.store.Snapshot()
	vol, err := snap.VolumeByID(nil, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, structs.NotFound("volume", volumeKey(req.Namespace, req.VolumeID))
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
	record := &structs.VolumeClaimRequest{Namespace: vol.Namespace, VolumeID: vol.ID, Claim: claim}
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

	pub := &publisher{s: s, vol: vol, node: node, plugin: plugin, claim: claim}
	if err := pub.publish(ctx); err != nil {
		pub.rollback(ctx)
		return nil, err
	}
	if _, _, err := s.log.Apply(ctx, structs.VolumeClaimType, record); err != nil {
		pub.rollback(ctx)
		return nil, err
	}
	s.logger.Info("volume claimed", "volume", volumeKey(vol.Namespace, vol.ID), "alloc", claim.AllocID,
		"node", claim.NodeID, "plugin", plugin.ID, "mode", claim.Mode)
	return claim, nil
}

// publisher runs the CSI calls of one claim and remembers how to undo them.
type publisher struct {
	s      *Server
	vol    *structs.Volume
	node   *structs.Node
	plugin *structs.Plugin
	claim  *structs.Claim
	undo   []func(context.Context) error
}

func (p *publisher) publish(ctx context.Context) error {
	np := p.node.Plugins[p.plugin.ID]
	adapted, err := p.adapt(ctx)
	if err != nil {
		return err
	}
	p.claim.ExternalNodeID = adapted.NodeID
	secrets := selectSecrets(p.vol.Secrets, adapted.SecretKeys)
	capability := csi.Capability(p.claim.AccessMode, p.claim.AttachmentMode, p.vol.FSType, p.vol.MountFlags)
	readonly := p.claim.Mode == structs.ClaimRead

	if p.plugin.Capabilities.PublishUnpublish {
		if adapted.NodeID == "" {
			// GCE PD and others reject an empty node ID; never send one (ANCHORS: CSI spec rules).
			return structs.Invalid("node_id", "no external node ID for node %q and plugin %q: register the node's plugin endpoint", p.node.ID, p.plugin.ID)
		}
		resp, err := p.s.csi.ControllerPublishVolume(ctx, p.plugin.ControllerEndpoint, &csipb.ControllerPublishVolumeRequest{
			VolumeId: adapted.VolumeID, NodeId: adapted.NodeID, VolumeCapability: capability,
			Readonly: readonly, Secrets: secrets, VolumeContext: adapted.VolumeContext,
		})
		if err != nil {
			return fmt.Errorf("controller publish of volume %q on node %q: %w", p.vol.ID, p.node.ID, err)
		}
		p.claim.PublishContext = resp.GetPublishContext()
		p.undo = append(p.undo, func(ctx context.Context) error {
			return p.s.csi.ControllerUnpublishVolume(ctx, p.plugin.ControllerEndpoint, &csipb.ControllerUnpublishVolumeRequest{
				VolumeId: adapted.VolumeID, NodeId: adapted.NodeID, Secrets: secrets,
			})
		})
	}
	if np == nil || np.Endpoint == "" {
		return nil
	}
	staging, target := csi.Paths(p.node.RootDir, p.plugin.ID, p.vol.Namespace, p.vol.ID, p.claim.AllocID)
	p.claim.TargetPath = target
	if np.StageUnstage {
		p.claim.StagingPath = staging
		// Stage once per volume and node: later claims on the node reuse it
		// (CSI spec: NodeStageVolume is per volume per node).
		if !p.stagedOnNode() {
			err := p.s.csi.NodeStageVolume(ctx, np.Endpoint, &csipb.NodeStageVolumeRequest{
				VolumeId: adapted.VolumeID, PublishContext: p.claim.PublishContext, StagingTargetPath: staging,
				VolumeCapability: capability, Secrets: secrets, VolumeContext: adapted.VolumeContext,
			})
			if err != nil {
				return fmt.Errorf("node stage of volume %q on node %q: %w", p.vol.ID, p.node.ID, err)
			}
			p.undo = append(p.undo, func(ctx context.Context) error {
				return p.s.csi.NodeUnstageVolume(ctx, np.Endpoint, &csipb.NodeUnstageVolumeRequest{
					VolumeId: adapted.VolumeID, StagingTargetPath: staging,
				})
			})
		}
	}
	err = p.s.csi.NodePublishVolume(ctx, np.Endpoint, &csipb.NodePublishVolumeRequest{
		VolumeId: adapted.VolumeID, PublishContext: p.claim.PublishContext, StagingTargetPath: p.claim.StagingPath,
		TargetPath: target, VolumeCapability: capability, Readonly: readonly, Secrets: secrets,
		VolumeContext: adapted.VolumeContext,
	})
	if err != nil {
		return fmt.Errorf("node publish of volume %q on node %q: %w", p.vol.ID, p.node.ID, err)
	}
	p.undo = append(p.undo, func(ctx context.Context) error {
		return p.s.csi.NodeUnpublishVolume(ctx, np.Endpoint, &csipb.NodeUnpublishVolumeRequest{
			VolumeId: adapted.VolumeID, TargetPath: target,
		})
	})
	return nil
}

// stagedOnNode reports whether another claim of the volume on the same node
// has already staged it.
func (p *publisher) stagedOnNode() bool {
	for _, c := range p.vol.Claims {
		if c.NodeID == p.node.ID && c.State == structs.ClaimTaken {
			return true
		}
	}
	return false
}

// rollback undoes the publish steps that succeeded, newest first. It runs
// on a context detached from the caller's cancellation (a client that hung
// up must not leave a half-made attachment) but with its own deadline.
func (p *publisher) rollback(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(p.undo) - 1; i >= 0; i-- {
		if err := p.undo[i](ctx); err != nil {
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
	if err != nil {
		return nil, fmt.Errorf("csi adapter for volume %q: %w", p.vol.ID, err)
	}
	return resp, nil
}

// selectSecrets picks the named keys; nil keys means all (SpecAdapter
// leaves the choice to the host). Modules never see secret values.
func selectSecrets(all map[string]string, keys []string) map[string]string {
	if keys == nil {
		return all
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out
}
