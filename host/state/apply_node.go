package state

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
)

// Node agent writes: fences and heartbeat transitions. Both
// record an event and wake the volumes claimed on the node, so the
// watcher reassesses them through the same path as any other write.

// MaxFenceReasonLength bounds an operator's fence reason (it travels in
// events, claims and the CLI).
const MaxFenceReasonLength = 512

func init() {
	ops[structs.NodeFenceType] = mkOp(validateNodeFence, (*writer).fenceNode)
	ops[structs.NodeLivenessType] = mkOp(validateNodeLiveness, (*writer).nodeLiveness)
}

func validateNodeFence(snap *Snapshot, r *structs.NodeFenceRequest) error {
	if err := validID("node_id", r.NodeID); err != nil {
		return err
	}
	n, err := mustExist(snap.NodeByID, "node", r.NodeID)
	if err != nil {
		return err
	}
	if r.Fence == nil {
		if n.Fence == nil {
			return structs.Conflict("node %q is not fenced", r.NodeID)
		}
		return nil
	}
	f := r.Fence
	switch {
	case f.Reason == "":
		// The reason is the operator's attestation; a forced detach
		// without one could not be explained afterwards.
		return structs.Invalid("fence.reason", "is required: say why the node is known to be off")
	case len(f.Reason) > MaxFenceReasonLength:
		return structs.Invalid("fence.reason", "is %d bytes long, at most %d allowed", len(f.Reason), MaxFenceReasonLength)
	case !utf8.ValidString(f.Reason):
		return structs.Invalid("fence.reason", "is not valid UTF-8")
	case f.Source == "":
		return structs.Invalid("fence.source", "is required")
	case f.Time.IsZero():
		return structs.Invalid("fence.time", "is required")
	}
	if f.ByModule() {
		return validateModuleFence(n, r)
	}
	return nil
}

// validateModuleFence is where a module's fence (ABI 1.1) is held to what
// it may do: shorten the wait for a node that is still heartbeat-lost,
// the same loss the module was asked about, and nobody has fenced. A node
// that heartbeated since, even if it was lost again, is not the node the
// module judged.
func validateModuleFence(n *structs.Node, r *structs.NodeFenceRequest) error {
	switch {
	case len(r.Fence.Reason) > abi.MaxFenceReasonLength:
		return structs.Invalid("fence.reason", "is %d bytes long, at most %d allowed for a module", len(r.Fence.Reason), abi.MaxFenceReasonLength)
	case n.Fence != nil:
		return structs.Conflict("node %q is already fenced by %s", r.NodeID, n.Fence.Source)
	case !n.HeartbeatLost || n.Status == structs.NodeReady:
		return structs.Conflict("node %q is %s and heartbeating: a module may only confirm the fence of a heartbeat-lost node", r.NodeID, n.Status)
	case r.LostSince.IsZero() || !n.StatusSince.Equal(r.LostSince):
		return structs.Conflict("node %q has been %s since %s, not since %s as the module was told",
			r.NodeID, n.Status, n.StatusSince.UTC().Format(time.RFC3339Nano), r.LostSince.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

func (w *writer) fenceNode(r *structs.NodeFenceRequest) (any, error) {
	old, err := w.snap.NodeByID(nil, r.NodeID)
	if err != nil {
		return nil, err
	}
	n := old.Copy()
	n.ModifyIndex = w.index
	ev := &structs.Event{Type: structs.EventNodeFence, NodeID: n.ID}
	if r.Fence != nil {
		f := *r.Fence
		n.Fence = &f
		ev.Message = fmt.Sprintf("node %s fenced by %s: %s", n.ID, f.Source, f.Reason)
		ev.Fields = map[string]string{"action": "fence", "reason": f.Reason, "source": f.Source, "accessor": f.Accessor}
	} else {
		ev.Message = fmt.Sprintf("node %s unfenced (was fenced by %s: %s)", n.ID, old.Fence.Source, old.Fence.Reason)
		ev.Fields = map[string]string{"action": "unfence", "reason": old.Fence.Reason, "accessor": r.Accessor}
		n.Fence = nil
	}
	if err := w.insert(TableNodes, n); err != nil {
		return nil, err
	}
	if err := w.event(ev); err != nil {
		return nil, err
	}
	if f := r.Fence; f != nil && f.ByModule() {
		// An operator's fence is audited by the API route that took it; a
		// module's has no route, so its audit event is written here, in
		// the same entry as the fence.
		if err := w.event(&structs.Event{Type: structs.EventAudit, NodeID: n.ID, Message: ev.Message,
			Fields: map[string]string{"action": "node-fence", "accessor": f.Source, "reason": f.Reason}}); err != nil {
			return nil, err
		}
	}
	return nil, w.nodeMoved(n.ID)
}

func validateNodeLiveness(snap *Snapshot, r *structs.NodeLivenessRequest) error {
	if err := validID("node_id", r.NodeID); err != nil {
		return err
	}
	if !r.Status.Valid() {
		return structs.Invalid("status", "unknown status %q", r.Status)
	}
	if r.Time.IsZero() {
		return structs.Invalid("time", "is required")
	}
	n, err := mustExist(snap.NodeByID, "node", r.NodeID)
	if err != nil {
		return err
	}
	if n.Status != r.From {
		// The tracker decided from a status that has moved since (a
		// heartbeat or an operator raced it): the decision is stale.
		return structs.Conflict("node %q is %s, not %s as the transition to %s assumed", r.NodeID, n.Status, r.From, r.Status)
	}
	if r.FromHeartbeatLost != nil {
		if n.HeartbeatLost != *r.FromHeartbeatLost {
			// The same status, now the operator's word rather than a
			// lost heartbeat's (or the other way): a heartbeat's "ready"
			// decided before an operator's "down" must not undo it.
			return structs.Conflict("node %q is %s with its heartbeat_lost %t, not %t as the transition to %s assumed",
				r.NodeID, n.Status, n.HeartbeatLost, *r.FromHeartbeatLost, r.Status)
		}
		if n.Status != structs.NodeReady && !n.HeartbeatLost {
			// Liveness (the heartbeat tracker, the scheduler bridge)
			// moves only what it set: a node an operator marked down
			// stays down until an operator says otherwise.
			return structs.Conflict("node %q is %s by an operator's word, not a lost heartbeat: only an operator "+
				"(PUT /v1/node/<id>/status, with operator:write) moves it to %s", r.NodeID, n.Status, r.Status)
		}
	}
	return nil
}

func (w *writer) nodeLiveness(r *structs.NodeLivenessRequest) (any, error) {
	old, err := w.snap.NodeByID(nil, r.NodeID)
	if err != nil {
		return nil, err
	}
	n := old.Copy()
	n.Status = r.Status
	n.StatusReason = r.Reason
	n.StatusSince = r.Time.UTC()
	n.HeartbeatLost = r.Status != structs.NodeReady
	if r.Status == structs.NodeReady {
		n.LastSeen = r.Time.UTC()
	}
	n.ModifyIndex = w.index
	if err := w.insert(TableNodes, n); err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("node %s is %s", n.ID, n.Status)
	if r.Reason != "" {
		msg += ": " + r.Reason
	}
	if err := w.event(&structs.Event{Type: structs.EventNodeStatus, NodeID: n.ID, Message: msg,
		Fields: map[string]string{"from": string(old.Status), "to": string(n.Status)}}); err != nil {
		return nil, err
	}
	if old.Status != n.Status {
		return nil, w.nodeMoved(n.ID)
	}
	return nil, nil
}
