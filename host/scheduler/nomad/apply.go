package nomad

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// observe applies one Nomad allocation (from a list or an event) to what
// is pending. Each change is applied only when its ModifyIndex has not
// gone backwards: the stream starts at the older of the two lists' indexes
// and replays changes a list already showed.
func (b *Bridge) observe(ctx context.Context, r *run, snap *state.Snapshot, a Alloc) {
	t := r.allocs[a.ID]
	if t != nil && a.ModifyIndex < t.a.ModifyIndex {
		return
	}
	delete(r.unmirrored, a.ID) // observed now, or again below
	va, err := snap.AllocByID(nil, a.ID)
	if err != nil {
		b.log.Error("read allocation", "alloc", a.ID, "error", err)
		return
	}
	if va != nil && va.Source != SourceName {
		b.problem(r, "alloc/"+a.ID, a.ID, "", fmt.Sprintf("allocation %s was registered through the API, not by the Nomad bridge: it is not mirrored", a.ID))
		return
	}
	if t == nil {
		if va == nil && terminalInNomad(a.ClientStatus) {
			// It ended before it was ever mirrored: nothing to release,
			// and no problem line left about it (its job's meta, once
			// purged, was unreadable).
			b.forget(r, a.ID)
			return
		}
		if va != nil && va.ClientStatus.Terminal() {
			return // it ended in volhost, for good: Nomad lists it until its GC
		}
		t = &tracked{a: a}
		meta, err := b.nomad.Meta(ctx, a.ID)
		if err != nil {
			// Tried again at the next event or re-list; the cursor
			// stays below it meanwhile (run.unmirrored).
			b.problem(r, "alloc/"+a.ID, a.ID, "", fmt.Sprintf("allocation %s (job %s): cannot read its job's meta: %v", a.ID, a.JobID, err))
			if r.unmirrored == nil {
				r.unmirrored = map[string]uint64{}
			}
			r.unmirrored[a.ID] = a.ModifyIndex
			return
		}
		b.solved("alloc/" + a.ID)
		vols, errs := parseVolumes(meta, DefaultMetaPrefix, a.Namespace)
		for _, e := range errs {
			b.problem(r, "alloc/"+a.ID+"/meta", a.ID, "", fmt.Sprintf("allocation %s (job %s, group %s): %v", a.ID, a.JobID, a.TaskGroup, e))
		}
		t.vols, t.ignored = vols, len(vols) == 0 && va == nil
		r.allocs[a.ID] = t
	}
	t.a = a
	if t.ignored {
		if terminalInNomad(a.ClientStatus) {
			b.forget(r, a.ID)
		}
		return
	}
	b.apply(r, snap, va, a, "")
}

// apply mirrors allocation a (va: its volhost row, nil when new) by the
// status rule.
func (b *Bridge) apply(r *run, snap *state.Snapshot, va *structs.Alloc, a Alloc, why string) {
	nodeID := volhostNodeID(b.s.NodeID, a.NodeID, a.NodeName)
	if nodeID == "" {
		return // not placed yet
	}
	vn, err := snap.NodeByID(nil, nodeID)
	if err != nil {
		b.log.Error("read node", "node", nodeID, "error", err)
		return
	}
	if va == nil && terminalInNomad(a.ClientStatus) {
		// Ended before it was ever mirrored: nothing to release, and
		// nothing the cursor waits for, whether volhost knows its node
		// or not.
		b.forget(r, a.ID)
		return
	}
	t := r.allocs[a.ID]
	if t != nil {
		t.rejudge = false // judged now
	}
	if vn == nil && va == nil {
		b.problem(r, "node/"+nodeID, a.ID, "", fmt.Sprintf(
			"allocation %s is placed on Nomad node %s, which volhost does not know as node %q: register it (volhost node register, or volhost agent -client there) so its volumes can be claimed",
			a.ID, a.NodeName, nodeID))
		// Not mirrored: the cursor stays below it, and it is judged
		// again once volhost's nodes move (its node registered), not at
		// the next periodic re-list.
		if r.unmirrored == nil {
			r.unmirrored = map[string]uint64{}
		}
		r.unmirrored[a.ID] = a.ModifyIndex
		if t != nil {
			t.rejudge = true
		}
		return
	}
	delete(r.unmirrored, a.ID)
	b.solved("node/" + nodeID)
	n, inNomad := r.nodes[a.NodeID]
	view := nodeView{InNomad: inNomad, Status: n.Status, Fenced: vn != nil && vn.Fence != nil}
	if vn == nil {
		view.InNomad = false // the volhost node was removed: nothing runs there for volhost
	}
	v := decide(a.ClientStatus, view)
	if v.Held {
		if t != nil && !t.held {
			t.held = true
			b.setHeld(r)
		}
		b.problem(r, "held/"+a.ID, a.ID, nodeID, fmt.Sprintf("allocation %s on node %s is %s: %s", a.ID, nodeID, a.ClientStatus, v.Reason))
		return
	}
	if t != nil && t.held {
		t.held = false
		b.setHeld(r)
	}
	b.solved("held/" + a.ID)
	if va != nil && va.ClientStatus.Terminal() {
		if v.Status.Terminal() {
			b.forget(r, a.ID)
		}
		return // terminal is for good; a live status here is a replay
	}
	if va == nil && v.Status.Terminal() {
		b.forget(r, a.ID)
		return
	}
	if va == nil || va.ClientStatus != v.Status {
		if r.pendingAllocs == nil {
			r.pendingAllocs = map[string]*structs.Alloc{}
		}
		r.pendingAllocs[a.ID] = &structs.Alloc{ID: a.ID, Namespace: a.Namespace, NodeID: nodeID, JobID: a.JobID,
			ClientStatus: v.Status, Source: SourceName}
		if v.Status.Terminal() {
			msg := fmt.Sprintf("allocation %s ended on its client (%s)", a.ID, a.ClientStatus)
			if why != "" {
				msg = fmt.Sprintf("allocation %s %s", a.ID, why)
			}
			if v.Reason != "" {
				msg += ": " + v.Reason
			}
			b.log.Info(msg, "alloc", a.ID, "node", nodeID, "desired", a.DesiredStatus)
		}
	}
	if !v.Status.Terminal() && a.DesiredStatus != "stop" && a.DesiredStatus != "evict" {
		r.wantClaims = append(r.wantClaims, a.ID)
	} else if v.Status.Terminal() {
		// Forgotten once the status commits: forgotten now, a fence's
		// release whose commit failed was judged by nothing any more, and
		// committed later after the fence was lifted.
		r.forgets = append(r.forgets, a.ID)
	}
}

func terminalInNomad(status string) bool {
	return status == clientComplete || status == clientFailed || status == clientLost
}

// observeNode mirrors a Nomad node's status onto the volhost node it maps
// to. A node registered by a volhost node agent is left alone: its
// heartbeats own its status. Down (or disconnected) is written as a lost
// heartbeat is: its claims' node steps wait for a fence, never skipped on
// Nomad's timeout. Only such a down is brought back to ready, or on to
// gone: a node an operator marked down (heartbeat_lost clear) stays as
// the operator said, whatever Nomad reports, as the heartbeat tracker
// leaves it (the bridge's token has no operator:write).
//
// Several Nomad nodes may map to one volhost node: a machine reinstalled
// registers under a new Nomad node ID with the same name, and Nomad lists
// the old ID down until its node GC (24 hours by default). The volhost
// node is ready when any of them is (peers: every Nomad node as the
// caller knows it, the re-list's listing or r.nodes); judged one Nomad
// node at a time, the old ID's "down" and the new one's "ready" flipped
// it at every re-list. The volhost node is read fresh for each: a write
// for the previous Nomad node of the same machine has moved it.
func (b *Bridge) observeNode(ctx context.Context, r *run, n Node, peers map[string]Node) error {
	if old, ok := r.nodes[n.ID]; ok && n.ModifyIndex < old.ModifyIndex {
		return nil
	}
	prev := r.nodes[n.ID]
	r.nodes[n.ID] = n
	if peers == nil {
		peers = r.nodes
	}
	id := volhostNodeID(b.s.NodeID, n.ID, n.Name)
	vn, err := b.store.Snapshot().NodeByID(nil, id)
	if err != nil || vn == nil {
		return err
	}
	status := n.Status
	if b.readyElsewhere(peers, n, id) {
		status = nodeReady
	}
	var to structs.NodeStatus
	switch {
	case status == nodeReady && vn.Status != structs.NodeReady && vn.HeartbeatLost && !vn.Agent:
		to = structs.NodeReady
	case nodeDownInNomad(status) && vn.Status == structs.NodeReady && !vn.Agent:
		to = structs.NodeDown
	}
	if to != "" {
		if err := b.liveness(ctx, r, vn, to, "Nomad reports the node "+status); err != nil {
			return err
		}
	}
	if prev.Status != n.Status {
		return b.reheldOn(r, n.ID)
	}
	return nil
}

// readyElsewhere reports whether another Nomad node of peers that maps to
// volhost node id than n is ready (observeNode).
func (b *Bridge) readyElsewhere(peers map[string]Node, n Node, id string) bool {
	for _, m := range peers {
		if m.ID != n.ID && m.Status == nodeReady && volhostNodeID(b.s.NodeID, m.ID, m.Name) == id {
			return true
		}
	}
	return false
}

// nodeGone: Nomad no longer lists the node (system gc emits no event).
// The volhost node is gone only when no other Nomad node of listed maps
// to it (a reinstalled machine's old ID collected, its new one listed).
func (b *Bridge) nodeGone(ctx context.Context, r *run, n Node, listed map[string]Node) error {
	id := volhostNodeID(b.s.NodeID, n.ID, n.Name)
	for _, m := range listed {
		if volhostNodeID(b.s.NodeID, m.ID, m.Name) == id {
			b.log.Info("node removed from Nomad; its machine is listed under another Nomad node", "nomad_node", n.ID, "node", id, "listed_as", m.ID)
			return b.reheldOn(r, n.ID)
		}
	}
	b.log.Info("node removed from Nomad", "nomad_node", n.ID, "node", id)
	r.pendingEvents = append(r.pendingEvents, b.event("", id, fmt.Sprintf("Nomad node %s (%s) was removed from Nomad: volhost node %s is gone", n.Name, n.ID, id)))
	vn, err := b.store.Snapshot().NodeByID(nil, id)
	if err != nil {
		return err
	}
	if vn != nil && !vn.Agent && vn.Status != structs.NodeGone && (vn.Status == structs.NodeReady || vn.HeartbeatLost) {
		if err := b.liveness(ctx, r, vn, structs.NodeGone, "removed from Nomad (system gc)"); err != nil {
			return err
		}
	}
	return b.reheldOn(r, n.ID)
}

// liveness commits a node status change Nomad reported. A conflict means
// the status moved meanwhile (an operator, a race with ourselves): the
// next event or re-list judges again.
func (b *Bridge) liveness(ctx context.Context, r *run, vn *structs.Node, to structs.NodeStatus, reason string) error {
	lost := vn.HeartbeatLost
	err := b.w.NodeLiveness(ctx, &structs.NodeLivenessRequest{NodeID: vn.ID, From: vn.Status, FromHeartbeatLost: &lost, Status: to,
		Reason: reason, Time: b.clock.Now(), Term: r.term})
	if err != nil && !errors.Is(err, structs.ErrConflict) {
		return fmt.Errorf("node %s to %s: %w", vn.ID, to, err)
	}
	return nil
}

// reheldOn judges again the held allocations on Nomad node nomadID.
func (b *Bridge) reheldOn(r *run, nomadID string) error {
	snap := b.store.Snapshot()
	for _, t := range r.allocs {
		if t.held && t.a.NodeID == nomadID {
			va, err := snap.AllocByID(nil, t.a.ID)
			if err != nil {
				return err
			}
			b.apply(r, snap, va, t.a, "")
		}
	}
	return nil
}

// reheld judges every held allocation again (a node was fenced), and
// those waiting to be (tracked.rejudge). Outside a session (connected
// false: the backoff, Nomad maybe unreachable) only what ends an
// allocation is judged: a live status is Nomad's to say again, and
// judged from the last one seen, an allocation Nomad had stopped and
// collected meanwhile was mirrored running and its volume claimed.
func (b *Bridge) reheld(ctx context.Context, r *run, connected bool) error {
	snap := b.store.Snapshot()
	for _, t := range r.allocs {
		if !t.held && !t.rejudge {
			continue
		}
		if !connected && !t.held && !terminalInNomad(t.a.ClientStatus) && t.a.ClientStatus != clientVanished {
			continue
		}
		va, err := snap.AllocByID(nil, t.a.ID)
		if err != nil {
			return err
		}
		b.apply(r, snap, va, t.a, "")
	}
	return b.commit(ctx, r, false, false)
}

func (b *Bridge) setHeld(r *run) {
	n := 0
	for _, t := range r.allocs {
		if t.held {
			n++
		}
	}
	b.mu.Lock()
	b.held = n
	b.mu.Unlock()
}

func sortAllocs(as []*structs.Alloc) {
	slices.SortFunc(as, func(x, y *structs.Alloc) int { return strings.Compare(x.ID, y.ID) })
}
