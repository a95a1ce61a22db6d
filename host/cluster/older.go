package cluster

import (
	"context"

	"github.com/volhost/volhost/host/structs"
)

// The older forms of gated checkpoint fields (gates' Older column): what
// the leader writes while some server does not understand the field, so
// the claim release goes on during a rolling upgrade instead of failing.

// olderCheckpoint returns req without the fields whose features are not
// enabled, and whether a Free must be written as a second checkpoint.
func (c *Cluster) olderCheckpoint(req *structs.ClaimCheckpointRequest) (out *structs.ClaimCheckpointRequest, freeAfter bool) {
	out = req
	if req.Claim != nil && req.Claim.NodeUnpublished && !c.FeatureEnabled(FeatureNodeUnpublished) && !c.committedNodeUnpublished(req) {
		// Without the mark a retry repeats NodeUnpublishVolume, which is
		// idempotent (CSI spec, NodeUnpublishVolume: "MUST reply 0 OK"
		// when the target is already unpublished): the releases before
		// the mark existed did exactly that. A mark already committed (by
		// a leader older than the gates) is kept: the store refuses to
		// clear it.
		r := *out
		cl := *req.Claim
		cl.NodeUnpublished = false
		r.Claim = &cl
		out = &r
	}
	if cl := c.olderClaim(out.Claim); cl != out.Claim {
		r := *out
		r.Claim = cl
		out = &r
	}
	if out.Free && !c.FeatureEnabled(FeatureCheckpointFree) {
		r := *out
		r.Free = false
		out, freeAfter = &r, true
	}
	return out, freeAfter
}

// olderClaim returns cl without the publish record's marks whose
// features are not enabled (a copy; cl itself when nothing is dropped).
// The store derives Unattached when it commits a claim and keeps Restored
// once set: every checkpoint carries the committed values
// (host/state keepPublishRecord), so dropping them from the entry changes
// nothing on a server that knows them, and a server that does not never
// sees a field it would drop.
func (c *Cluster) olderClaim(cl *structs.Claim) *structs.Claim {
	if cl == nil {
		return nil
	}
	dropU := cl.Unattached && !c.FeatureEnabled(FeatureClaimUnattached)
	dropR := cl.Restored && !c.FeatureEnabled(FeatureClaimRestored)
	if !dropU && !dropR {
		return cl
	}
	out := *cl
	out.Unattached = out.Unattached && !dropU
	out.Restored = out.Restored && !dropR
	return &out
}

// olderRequest returns req in the form every server understands when it
// carries a gated field that has an older form; req itself otherwise (the
// gate then refuses what has none). Cluster.Apply runs it before checkGate.
func (c *Cluster) olderRequest(req any) any {
	switch r := req.(type) {
	case *structs.NodeUpsertRequest:
		if r == nil || r.Node == nil {
			return req
		}
		out := *r
		if !c.FeatureEnabled(FeatureNodeOperator) {
			out.HoldOperatorFields, out.Anonymous = "", false
		}
		if r.Node.RegisteredBy != "" && !c.FeatureEnabled(FeatureNodeRegistrar) {
			// Registered without the accessor: the API and the node
			// agent's stream checked the token when the request came in;
			// the store's second look at commit (a revocation in between)
			// waits for the last server to be upgraded.
			n := *r.Node
			n.RegisteredBy = ""
			out.Node, out.HoldOperatorFields, out.Anonymous = &n, "", false
		}
		if out == *r {
			return req
		}
		return &out
	case *structs.NodeLivenessRequest:
		if r == nil || r.FromHeartbeatLost == nil || c.FeatureEnabled(FeatureLivenessLost) {
			return req
		}
		out := *r
		out.FromHeartbeatLost = nil
		return &out
	case *structs.AllocUpsertRequest:
		if r == nil || !r.KeepNamespace || c.FeatureEnabled(FeatureAllocNamespace) {
			return req
		}
		out := *r
		out.KeepNamespace = false
		return &out
	case *structs.VolumeClaimRequest:
		if r == nil {
			return req
		}
		if cl := c.olderClaim(r.Claim); cl != r.Claim {
			out := *r
			out.Claim = cl
			return &out
		}
	case *structs.ClaimCheckpointRequest:
		if r != nil && r.Claim != nil {
			if cl := c.olderClaim(r.Claim); cl != r.Claim {
				out := *r
				out.Claim = cl
				return &out
			}
		}
	}
	return req
}

// olderRequestSettled is olderRequest for a write that may arrive while
// this leader is still stepping up, when every gate reads closed until the
// step-up writes the members' feature records (checkGateSettled): a field
// the older form would drop waits for the step-up, then is judged, so a
// fresh cluster's first registration keeps its token's accessor.
func (c *Cluster) olderRequestSettled(ctx context.Context, req any) any {
	out := c.olderRequest(req)
	if out == req || c.ReadyTerm() != 0 || !c.IsLeader() {
		return out
	}
	wctx, cancel := context.WithTimeout(ctx, gateSettleWait)
	defer cancel()
	if c.WaitForLeader(wctx) != nil {
		return out
	}
	return c.olderRequest(req)
}

// committedNodeUnpublished reports whether the committed claim already
// carries the NodeUnpublished mark.
func (c *Cluster) committedNodeUnpublished(req *structs.ClaimCheckpointRequest) bool {
	v, err := c.store.Snapshot().VolumeByID(nil, req.Namespace, req.VolumeID)
	if err != nil || v == nil {
		return false
	}
	old := v.Claims[req.Claim.AllocID]
	return old != nil && old.NodeUnpublished
}

// checkpointOlder writes a checkpoint in the forms every server
// understands: a Free becomes the controller-detached checkpoint, then the
// ready-to-free one, as releases did before Free (nothing runs between
// the two; a leader lost in between leaves the claim at
// controller-detached, which the next leader's pass frees).
func (w ClaimWriter) checkpointOlder(ctx context.Context, req *structs.ClaimCheckpointRequest) (uint64, error) {
	req, freeAfter := w.c.olderCheckpoint(req)
	idx, err := w.c.checkpoints.submit(ctx, req)
	if err != nil || !freeAfter {
		return idx, err
	}
	free := *req
	cl := *req.Claim
	cl.State = structs.ClaimReadyToFree
	free.Claim = &cl
	free.Unstaged, free.ControllerUnpublished = false, false
	return w.c.checkpoints.submit(ctx, &free)
}
