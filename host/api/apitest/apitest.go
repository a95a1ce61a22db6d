// Package apitest provides a Backend for tests of the API, its client and
// the CLI: it writes straight into a real state.Store (no raft, no CSI
// calls), so reads, blocking queries and the store's validation behave as
// in the product. It is not for production use.
package apitest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// StoreBackend implements api.Backend by applying requests to Store at
// increasing indexes. Probing is simulated: a registered plugin advertises
// PUBLISH_UNPUBLISH_VOLUME when it has a controller endpoint, and a node
// plugin reports the node ID as its external node ID.
type StoreBackend struct {
	Store *state.Store
	// Now stamps writes; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	index uint64
}

// NewStoreBackend returns a backend over a fresh store.
func NewStoreBackend() *StoreBackend {
	return &StoreBackend{Store: state.NewStore()}
}

// Serve starts an httptest server running the API over b, closed when t ends.
func Serve(t testing.TB, b *StoreBackend) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(api.NewServer(api.Config{Audit: b}, b.Store, b, nil).Handler())
	t.Cleanup(ts.Close)
	return ts
}

// apply writes one entry at the next index; a refusal consumes no index.
func (b *StoreBackend) apply(t structs.MessageType, req any) (any, uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.index == 0 {
		b.index = b.Store.LatestIndex()
	}
	now := time.Now()
	if b.Now != nil {
		now = b.Now()
	}
	// As the leader does (cluster.Apply): the pre-log check, which holds
	// new IDs to the strict rule, then the apply.
	if err := b.Store.Snapshot().Validate(t, req); err != nil {
		return nil, 0, err
	}
	resp, err := b.Store.ApplyAt(b.index+1, now, t, req)
	if err != nil {
		return nil, 0, err
	}
	b.index++
	return resp, b.index, nil
}

// RegisterPlugin implements api.Backend.
func (b *StoreBackend) RegisterPlugin(_ context.Context, p *structs.Plugin) (*structs.Plugin, error) {
	p = p.Copy()
	p.Capabilities.PublishUnpublish = p.ControllerEndpoint != ""
	if _, _, err := b.apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: p}); err != nil {
		return nil, err
	}
	got, err := b.Store.Snapshot().PluginByID(nil, p.ID)
	return got, err
}

// RegisterNode implements api.Backend.
func (b *StoreBackend) RegisterNode(_ context.Context, n *structs.Node) (*structs.Node, error) {
	n = n.Copy()
	for _, np := range n.Plugins {
		if np != nil && np.ExternalNodeID == "" {
			np.ExternalNodeID = n.ID
		}
	}
	if _, _, err := b.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n}); err != nil {
		return nil, err
	}
	return b.Store.Snapshot().NodeByID(nil, n.ID)
}

// UpdateNodeStatus implements api.Backend.
func (b *StoreBackend) UpdateNodeStatus(_ context.Context, id string, st structs.NodeStatus) (uint64, error) {
	_, idx, err := b.apply(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: id, Status: st})
	return idx, err
}

// FenceNode implements api.Backend.
func (b *StoreBackend) FenceNode(_ context.Context, id, reason, accessor string) (uint64, error) {
	_, idx, err := b.apply(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: id,
		Fence: &structs.NodeFence{Reason: reason, Source: "operator", Accessor: accessor, Time: time.Now()}})
	return idx, err
}

// UnfenceNode implements api.Backend.
func (b *StoreBackend) UnfenceNode(_ context.Context, id, accessor string) (uint64, error) {
	_, idx, err := b.apply(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: id, Accessor: accessor})
	return idx, err
}

// DeregisterNode implements api.Backend.
func (b *StoreBackend) DeregisterNode(_ context.Context, id string, force bool) ([]structs.NodeClaim, uint64, error) {
	resp, idx, err := b.apply(structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: id, Force: force})
	claims, _ := resp.([]structs.NodeClaim)
	return claims, idx, err
}

// DeregisterPlugin implements api.Backend.
func (b *StoreBackend) DeregisterPlugin(_ context.Context, id string) (uint64, error) {
	_, idx, err := b.apply(structs.PluginDeregisterType, &structs.PluginDeregisterRequest{PluginID: id})
	return idx, err
}

// RegisterVolumes implements api.Backend.
func (b *StoreBackend) RegisterVolumes(_ context.Context, vols []*structs.Volume) (uint64, error) {
	_, idx, err := b.apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
	return idx, err
}

// DeregisterVolume implements api.Backend.
func (b *StoreBackend) DeregisterVolume(_ context.Context, ns, id string, force bool) ([]*structs.Leftover, uint64, error) {
	resp, idx, err := b.apply(structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{
		Namespace: ns, VolumeID: id, Force: force, Reason: "operator"})
	if err != nil {
		return nil, 0, err
	}
	left, _ := resp.([]*structs.Leftover)
	return left, idx, nil
}

// ClaimVolume implements api.Backend: it records the claim as taken, with
// the volume's modes where the request leaves them out.
func (b *StoreBackend) ClaimVolume(_ context.Context, req *structs.ClaimRequest) (*structs.Claim, error) {
	v, err := b.Store.Snapshot().VolumeByID(nil, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, structs.NotFound("volume", req.Namespace+"/"+req.VolumeID)
	}
	c := &structs.Claim{AllocID: req.AllocID, NodeID: req.NodeID, Mode: req.Mode, State: structs.ClaimTaken,
		AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode, ExternalNodeID: req.NodeID}
	c.DefaultModes(v)
	if _, _, err := b.apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: req.Namespace, VolumeID: req.VolumeID, Claim: c}); err != nil {
		return nil, err
	}
	v, err = b.Store.Snapshot().VolumeByID(nil, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	return v.Claims[req.AllocID], nil
}

// DetachVolume implements api.Backend: it refuses while a live allocation on
// the node uses the volume and otherwise moves that node's claims straight
// to ready-to-free (no CSI calls).
func (b *StoreBackend) DetachVolume(_ context.Context, ns, id, nodeID string) (*structs.DetachResult, error) {
	snap := b.Store.Snapshot()
	v, err := snap.VolumeByID(nil, ns, id)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, structs.NotFound("volume", ns+"/"+id)
	}
	res := &structs.DetachResult{Namespace: ns, VolumeID: id, NodeID: nodeID}
	for allocID, c := range v.Claims {
		if c.NodeID != nodeID {
			continue
		}
		a, err := snap.AllocByID(nil, allocID)
		if err != nil {
			return nil, err
		}
		if a != nil && !a.ClientStatus.Terminal() {
			return nil, structs.Conflict("allocation %q on node %q still uses volume %q", allocID, nodeID, id)
		}
		n := c.Copy()
		n.State = structs.ClaimReadyToFree
		if _, _, err := b.apply(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: ns, VolumeID: id, Claim: n}); err != nil {
			return nil, err
		}
		res.Claims = append(res.Claims, n)
		res.Released = append(res.Released, allocID)
	}
	return res, nil
}

// UpsertAllocs implements api.Backend.
func (b *StoreBackend) UpsertAllocs(_ context.Context, allocs []*structs.Alloc) (uint64, error) {
	_, idx, err := b.apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
	return idx, err
}

// ClearLeftovers implements api.Backend.
func (b *StoreBackend) ClearLeftovers(_ context.Context, ids []string, all bool) (uint64, error) {
	_, idx, err := b.apply(structs.LeftoversClearType, &structs.LeftoversClearRequest{IDs: ids, All: all})
	return idx, err
}

// SystemGC implements api.Backend.
func (b *StoreBackend) SystemGC(context.Context) (int, error) {
	refs, err := b.Store.Snapshot().ReleasableVolumes(nil)
	if err != nil || len(refs) == 0 {
		return 0, err
	}
	if _, _, err := b.apply(structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: refs}); err != nil {
		return 0, fmt.Errorf("gc: %w", err)
	}
	return len(refs), nil
}

// Leader implements api.Backend: this test server is always the leader.
func (b *StoreBackend) Leader() (string, bool) { return "127.0.0.1:4747", true }

// Stick marks a volume stuck (what the watcher does after max_attempts).
func (b *StoreBackend) Stick(ns, id string, s *structs.Stuck) error {
	_, _, err := b.apply(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: ns, VolumeID: id, Stuck: s})
	return err
}

// Checkpoint writes a whole claim (what the watcher does at each step or failure).
func (b *StoreBackend) Checkpoint(ns, id string, c *structs.Claim) error {
	_, _, err := b.apply(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: ns, VolumeID: id, Claim: c})
	return err
}

// Apply writes one request through the store, as the replicated log
// would (the acl.Log and api.AuditLog interfaces).
func (b *StoreBackend) Apply(_ context.Context, t structs.MessageType, req any) (uint64, any, error) {
	resp, idx, err := b.apply(t, req)
	return idx, resp, err
}
