package watcher

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// Detach runs the release steps now for the releasable claims of a volume on
// one node (`volume detach VOL NODE`), ignoring their backoff: the operator
// asked. The node step is skipped when the node is down or gone, as the
// default policy does. It refuses with a structs.ErrConflict error naming
// the live allocations when one on that node still uses the volume (the
// reference system silently skips and reports success), and answers
// structs.ErrNotFound for an unknown volume or node, before anything is
// written. A claim that could not finish keeps its error in the result;
// DetachResult.Released lists those that reached ready-to-free.
func (w *Watcher) Detach(ctx context.Context, namespace, volumeID, nodeID string) (*structs.DetachResult, error) {
	switch {
	case namespace == "":
		return nil, structs.Invalid("namespace", "must not be empty")
	case volumeID == "":
		return nil, structs.Invalid("volume_id", "must not be empty")
	case nodeID == "":
		return nil, structs.Invalid("node_id", "must not be empty")
	}
	ctx, cancel, err := w.leaderContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("detach: %w", err)
	}
	defer cancel()
	ref := structs.VolumeRef{Namespace: namespace, ID: volumeID}
	st, err := w.acquire(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("detach: %w", err)
	}
	p, err := w.detachLocked(ctx, ref, nodeID)
	// Hand the volume back through a normal pass: it re-arms the wake-ups
	// of claims left in backoff (acquire cancelled the volume's timer).
	w.mu.Lock()
	st.dirty = true
	w.mu.Unlock()
	w.finish(ref, st, time.Time{}, nil)
	if err != nil {
		return nil, err
	}
	res := &structs.DetachResult{Namespace: namespace, VolumeID: volumeID, NodeID: nodeID, Released: p.released}
	for _, c := range p.onNode {
		res.Claims = append(res.Claims, c.Copy())
	}
	return res, nil
}

// detachPass is a pass restricted to one node's claims.
type detachPass struct {
	*pass
	onNode []*structs.Claim
}

// detachLocked does the work while the volume is held (no pass runs on it).
func (w *Watcher) detachLocked(ctx context.Context, ref structs.VolumeRef, nodeID string) (*detachPass, error) {
	p, err := w.load(ref)
	if err != nil {
		return nil, fmt.Errorf("detach: %w", err)
	}
	if p == nil {
		return nil, structs.NotFound("volume", ref.Namespace+"/"+ref.ID)
	}
	d := &detachPass{pass: p}
	for _, c := range p.sortedClaims() {
		if c.NodeID == nodeID {
			d.onNode = append(d.onNode, c)
		}
	}
	node, err := w.deps.State.Node(nodeID)
	if err != nil {
		return nil, fmt.Errorf("detach: read node %q: %w", nodeID, err)
	}
	// A garbage-collected node is still known through its claims.
	if node == nil && len(d.onNode) == 0 {
		return nil, structs.NotFound("node", nodeID)
	}
	var live []string
	for _, c := range d.onNode {
		if !p.releasable(c) {
			live = append(live, fmt.Sprintf("%s (%s)", c.AllocID, p.allocStatus(c.AllocID)))
		}
	}
	if len(live) > 0 {
		sort.Strings(live)
		return nil, structs.Conflict("volume %q is in use on node %q by live allocation(s) %s",
			ref.Namespace+"/"+ref.ID, nodeID, strings.Join(live, ", "))
	}
	// An operator's detach skips the node step of a node removed or set
	// down by an operator, or fenced (nodeStep); a node that only missed
	// heartbeats is tried through its agent, never skipped on a timeout.
	skipNode := node == nil || (node.Status != structs.NodeReady && !node.HeartbeatLost)
	for _, c := range d.onNode {
		if err := p.release(ctx, c, skipNode); err != nil {
			return d, fmt.Errorf("detach: %w", err)
		}
	}
	if err := p.clearStuck(ctx); err != nil {
		return d, fmt.Errorf("detach: %w", err)
	}
	return d, nil
}
