package cluster

import (
	"context"
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// ClaimWriter commits the watcher's writes through the cluster. Claim
// checkpoints are group-committed (batch.go): concurrent ones share a log
// entry, each checked and answered on its own; the other writes take one
// entry per call. It implements the watcher's ClaimWriter interface.
type ClaimWriter struct{ c *Cluster }

// ClaimWriter returns the watcher's view of the replicated log.
func (c *Cluster) ClaimWriter() ClaimWriter { return ClaimWriter{c: c} }

// CheckpointClaim writes the whole claim; at ready-to-free the store removes
// it from the volume in the same entry. Checkpoints of other volumes
// written meanwhile may share the entry (group commit).
func (w ClaimWriter) CheckpointClaim(ctx context.Context, req *structs.ClaimCheckpointRequest) (uint64, error) {
	if req == nil {
		return 0, structs.Invalid("request", "is nil")
	}
	if err := needTerm("claim checkpoint", req.Term); err != nil {
		return 0, err
	}
	return w.checkpointOlder(ctx, req)
}

// needTerm refuses a fenced write of the watcher without a leadership
// term. The FSM takes term 0 as unfenced (a store's own tests write so),
// which leader work must never be: a checkpoint that needs no CSI call (a
// hold, an abandon) would then be committed with no fence at all, whoever
// wrote it and however late.
func needTerm(what string, term uint64) error {
	if term == 0 {
		return fmt.Errorf("%s without a leadership term: leader work writes under the term it runs in: %w", what, structs.ErrNoLeader)
	}
	return nil
}

// MarkStuck marks (or, with a nil Stuck, clears) a volume as stuck.
func (w ClaimWriter) MarkStuck(ctx context.Context, req *structs.VolumeStuckRequest) (uint64, error) {
	idx, _, err := w.c.Apply(ctx, structs.VolumeStuckType, req)
	return idx, err
}

// GCClaims writes the empty GC claim that bumps the volumes' indexes.
func (w ClaimWriter) GCClaims(ctx context.Context, req *structs.ClaimGCRequest) (uint64, error) {
	idx, _, err := w.c.Apply(ctx, structs.ClaimGCType, req)
	return idx, err
}

// ForceDeregister drops a volume and its claims without CSI calls and
// returns the leftovers recorded for them. The request is sent with Force
// set whatever the caller passed: this path exists only for forcing.
func (w ClaimWriter) ForceDeregister(ctx context.Context, req *structs.VolumeDeregisterRequest) ([]*structs.Leftover, error) {
	if req == nil {
		return nil, structs.Invalid("request", "is nil")
	}
	r := *req
	r.Force = true
	_, resp, err := w.c.Apply(ctx, structs.VolumeDeregisterType, &r)
	if err != nil {
		return nil, err
	}
	ls, ok := resp.([]*structs.Leftover)
	if !ok {
		return nil, fmt.Errorf("force deregister: unexpected response %T", resp)
	}
	return ls, nil
}

// FenceNode commits a fence an adapter module confirmed (ABI 1.1): the
// watcher's write, fenced by its term; the store refuses it unless the
// node is still heartbeat-lost as the module was told.
func (w ClaimWriter) FenceNode(ctx context.Context, req *structs.NodeFenceRequest) (uint64, error) {
	if req == nil {
		return 0, structs.Invalid("request", "is nil")
	}
	if err := needTerm("module's node fence", req.Term); err != nil {
		return 0, err
	}
	idx, _, err := w.c.Apply(ctx, structs.NodeFenceType, req)
	return idx, err
}
