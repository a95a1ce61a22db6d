package state

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

// Apply applies one request of message type t at raft index, stamping
// events and defaulted times with the store clock's now. It is the single
// write entry point for tests and tools; the FSM uses ApplyAt with the time
// carried in the log entry so a replay is deterministic.
func (s *Store) Apply(index uint64, t structs.MessageType, req any) (resp any, err error) {
	return s.ApplyAt(index, s.cfg.Clock.Now(), t, req)
}

// ApplyAt validates req against the current state and, if valid, applies it
// atomically at raft index: the write, the events it causes and the per-table
// index bumps land in one memdb transaction. A refused request leaves the
// state untouched and returns the typed validation error. now stamps events,
// leftovers and times the request leaves zero; it must come from the log
// entry, never from the wall clock, so every replica (and a replay after a
// restart) computes the same state.
//
// The response is []*structs.Leftover for a forced VolumeDeregisterType,
// []error (one per checkpoint, nil when applied) for a
// ClaimCheckpointBatchType (batch.go), and nil otherwise.
func (s *Store) ApplyAt(index uint64, now time.Time, t structs.MessageType, req any) (resp any, err error) {
	o, ok := ops[t]
	if !ok {
		return nil, structs.Invalid("type", "unknown message type %d", t)
	}
	if index == 0 {
		return nil, structs.Invalid("index", "raft index must be > 0")
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	st := s.cur.Load()
	txn := st.db.Txn(true)
	defer txn.Abort() // no-op after Commit
	snap := &Snapshot{txn: txn}
	if !ownRowsOff {
		snap.own = &ownRows{txn: txn, base: st.db.Txn(false)}
	}
	if err := o.validate(snap, req); err != nil {
		return nil, err
	}
	w := &writer{txn: txn, snap: snap, index: index, now: now.UTC(), retention: s.retention(),
		eventCounts: s.events, eventFields: &s.eventFields, bumped: map[string]bool{}}
	resp, err = o.apply(w, req)
	if err != nil {
		// Validation passed, so this is a store bug or a memdb error; the
		// transaction is aborted and the state left as it was.
		s.logger.Error("apply failed", "index", index, "type", t, "error", err)
		return nil, fmt.Errorf("apply %d at index %d: %w", t, index, err)
	}
	if err := w.finish(); err != nil {
		s.logger.Error("apply failed", "index", index, "type", t, "error", err)
		return nil, fmt.Errorf("apply %d at index %d: %w", t, index, err)
	}
	txn.Commit()
	s.events = w.eventCounts
	return resp, nil
}

// writer carries one write transaction.
type writer struct {
	txn       *memdb.Txn
	snap      *Snapshot // reads inside txn
	index     uint64
	now       time.Time
	retention EventRetention
	bumped    map[string]bool
	events    int
	// eventCounts is the store's, as of this write (Store.events before
	// it, Store.events after it commits).
	eventCounts
	// eventFields is the store's table of shared event fields.
	eventFields *fieldsTable
	// rings maps each ring written to to its last ring sequence number.
	rings map[string]uint64
	// trimmed: this transaction deleted events (events.go).
	trimmed bool
	// stats is this write's change to VolumeStats (stats.go).
	stats volumeDelta
	// nodeClaimDelta is this write's change to the claims on each node
	// (node_claim_counts.go).
	nodeClaimDelta map[string]int
	// mods is, for each volume written, the ModifyIndex it had before
	// this write and has after it, 0 when absent (volume_mods.go).
	mods map[structs.VolumeRef]volumeMod
}

func (w *writer) insert(table string, obj any) error {
	if table == TableVolumes {
		// Volume writes keep VolumeStats in step: putVolume, deleteVolume.
		return fmt.Errorf("insert into %s: a volume write must go through putVolume", table)
	}
	return w.insertRow(table, obj)
}

func (w *writer) insertRow(table string, obj any) error {
	if err := w.txn.Insert(table, obj); err != nil {
		return fmt.Errorf("insert into %s: %w", table, err)
	}
	w.snap.own.wrote(table, obj, false)
	w.bumped[table] = true
	return nil
}

func (w *writer) delete(table string, obj any) error {
	if table == TableVolumes {
		return fmt.Errorf("delete from %s: a volume write must go through deleteVolume", table)
	}
	return w.deleteRow(table, obj)
}

func (w *writer) deleteRow(table string, obj any) error {
	if err := w.txn.Delete(table, obj); err != nil {
		return fmt.Errorf("delete from %s: %w", table, err)
	}
	w.snap.own.wrote(table, obj, true)
	w.bumped[table] = true
	return nil
}

// finish trims the event rings to their bounds (events.go), updates the
// volume statistics (stats.go) and writes the index of every table touched.
func (w *writer) finish() error {
	if w.events > 0 {
		if err := w.trimEvents(); err != nil {
			return err
		}
	}
	if err := w.finishStats(); err != nil {
		return err
	}
	if err := w.finishNodeClaims(); err != nil {
		return err
	}
	if err := w.finishVolumeMods(); err != nil {
		return err
	}
	tables := make([]string, 0, len(w.bumped))
	for t := range w.bumped {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		if err := w.txn.Insert(TableIndex, &indexRow{Key: t, Value: w.index}); err != nil {
			return fmt.Errorf("update index of %s: %w", t, err)
		}
	}
	return nil
}

// touchVolumes bumps the ModifyIndex of vols (copies), so the watcher, which
// only watches the volumes table, sees them move. A copy of the volume's
// own fields only: nothing else changes, and a stored object's maps and
// claims are never changed in place (withNewClaims), so the new version
// shares them; a deep copy per volume woken was every claim's release
// copying the volume with all its claims once more (BenchmarkReleaseWrites).
func (w *writer) touchVolumes(vols []*structs.Volume) error {
	for _, v := range vols {
		c := *v
		n := &c
		n.ModifyIndex = w.index
		if err := w.putVolume(v, n); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) upsertPlugin(r *structs.PluginUpsertRequest) (any, error) {
	p := r.Plugin.Copy()
	old, err := w.snap.PluginByID(nil, p.ID)
	if err != nil {
		return nil, err
	}
	p.CreateIndex = w.index
	if old != nil {
		p.CreateIndex = old.CreateIndex
	}
	p.ModifyIndex = w.index
	return nil, w.insert(TablePlugins, p)
}

func (w *writer) deregisterPlugin(r *structs.PluginDeregisterRequest) (any, error) {
	p, err := w.snap.PluginByID(nil, r.PluginID)
	if err != nil {
		return nil, err
	}
	return nil, w.delete(TablePlugins, p)
}

func (w *writer) upsertNode(r *structs.NodeUpsertRequest) (any, error) {
	n := r.Node.Copy()
	old, err := w.snap.NodeByID(nil, n.ID)
	if err != nil {
		return nil, err
	}
	n.CreateIndex = w.index
	keepLastAnswers(old, n)
	if old != nil {
		n.CreateIndex = old.CreateIndex
		// A fence belongs to the store: a node (or its agent)
		// re-registering never lifts it; only `node unfence` does.
		n.Fence = old.Fence
		if r.HoldOperatorFields == structs.ByItsAgent {
			// Its status belongs to the heartbeat tracker and the
			// operator: the hello carried the one read when it came,
			// and an operator's "down" committed since was undone.
			n.Status, n.HeartbeatLost, n.StatusReason, n.StatusSince = old.Status, old.HeartbeatLost, old.StatusReason, old.StatusSince
		}
	}
	n.ModifyIndex = w.index
	if err := w.insert(TableNodes, n); err != nil {
		return nil, err
	}
	probed, err := w.probeEvents(old, n)
	if err != nil {
		return nil, err
	}
	if old != nil && (old.Status != n.Status || probed) {
		return nil, w.nodeMoved(n.ID)
	}
	return nil, nil
}

// nodeMoved wakes the volumes claimed on a node whose status changed or
// which is gone: their node step may now be skipped (claims on dead nodes
// are freed, unlike hashicorp/nomad#12346).
func (w *writer) nodeMoved(nodeID string) error {
	vols, err := w.snap.VolumesClaimedOnNode(nil, nodeID)
	if err != nil {
		return err
	}
	return w.touchVolumes(vols)
}

func (w *writer) updateNodeStatus(r *structs.NodeStatusUpdateRequest) (any, error) {
	old, err := w.snap.NodeByID(nil, r.NodeID)
	if err != nil {
		return nil, err
	}
	n := old.Copy()
	n.Status = r.Status
	// An operator's status is the operator's word, not a timeout.
	n.HeartbeatLost, n.StatusReason = false, ""
	if !r.LastSeen.IsZero() {
		n.LastSeen = r.LastSeen
	}
	n.ModifyIndex = w.index
	if err := w.insert(TableNodes, n); err != nil {
		return nil, err
	}
	if old.Status != n.Status {
		return nil, w.nodeMoved(n.ID)
	}
	return nil, nil
}

// deregisterNode removes a node and answers the claims still on it
// (forced: their node steps will be skipped), which the volumes' watcher
// is woken to release.
func (w *writer) deregisterNode(r *structs.NodeDeregisterRequest) (any, error) {
	n, err := w.snap.NodeByID(nil, r.NodeID)
	if err != nil {
		return nil, err
	}
	claims, err := nodeClaims(w.snap, r.NodeID)
	if err != nil {
		return nil, err
	}
	if err := w.delete(TableNodes, n); err != nil {
		return nil, err
	}
	return claims, w.nodeMoved(r.NodeID)
}

func (w *writer) registerVolumes(r *structs.VolumeRegisterRequest) (any, error) {
	for _, in := range r.Volumes {
		v := in.Copy()
		internVolume(v)
		old, err := w.snap.VolumeByID(nil, v.Namespace, v.ID)
		if err != nil {
			return nil, err
		}
		v.CreateIndex = w.index
		v.Claims, v.Stuck = nil, nil
		dropEmpty(v)
		if old != nil {
			// Re-registration updates the spec; claims and stuck state
			// belong to the store, not to the request.
			o := old.Copy()
			v.CreateIndex = o.CreateIndex
			v.Claims, v.Stuck = o.Claims, o.Stuck
		}
		v.ModifyIndex = w.index
		if err := w.putVolume(old, v); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// dropEmpty stores an empty map or slice of a registered volume as nil:
// the JSON is the same (the fields are omitempty), a restore reads them
// back as nil anyway, and an empty map kept per volume is memory a
// million volumes pay for nothing (BenchmarkScale).
func dropEmpty(v *structs.Volume) {
	if len(v.Secrets) == 0 {
		v.Secrets = nil
	}
	if len(v.Parameters) == 0 {
		v.Parameters = nil
	}
	if len(v.Context) == 0 {
		v.Context = nil
	}
	if len(v.MountFlags) == 0 {
		v.MountFlags = nil
	}
}

func (w *writer) deregisterVolume(r *structs.VolumeDeregisterRequest) (any, error) {
	v, err := w.snap.VolumeByID(nil, r.Namespace, r.VolumeID)
	if err != nil {
		return nil, err
	}
	if err := w.deleteVolume(v); err != nil {
		return nil, err
	}
	if !r.Force {
		return nil, nil
	}
	when := r.Time.UTC()
	if r.Time.IsZero() {
		when = w.now
	}
	reason := r.Reason
	if reason == "" {
		reason = "operator"
	}
	evType := structs.EventForceDeregister
	if reason == "escape-hatch" {
		evType = structs.EventAutoForce
	}
	ids := v.ClaimIDs()
	// No CSI call happens here: every claim not yet released may have left
	// an attachment behind, which is recorded instead of dropped silently
	// (hashicorp/nomad#8641: the reference system forgets them).
	leftovers := make([]*structs.Leftover, 0, len(ids))
	for _, id := range ids {
		c := v.Claims[id]
		l := &structs.Leftover{
			ID:             volName(v.Namespace, v.ID) + "/" + id,
			Namespace:      v.Namespace,
			VolumeID:       v.ID,
			ExternalID:     v.ExternalID,
			PluginID:       v.PluginID,
			AllocID:        id,
			NodeID:         c.NodeID,
			ExternalNodeID: c.ExternalNodeID,
			State:          c.State,
			InDoubt:        c.StepInDoubt(),
			Reason:         reason,
			Time:           when,
			CreateIndex:    w.index,
		}
		if err := w.insert(TableLeftovers, l); err != nil {
			return nil, err
		}
		leftovers = append(leftovers, l)
	}
	msg := fmt.Sprintf("volume force-deregistered (%s) with %d unreleased claim(s)", reason, len(ids))
	if err := w.event(&structs.Event{
		Type: evType, Time: when, Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID,
		Message: msg, Fields: map[string]string{"leftovers": strconv.Itoa(len(leftovers))},
	}); err != nil {
		return nil, err
	}
	// The response is shared with the caller: give it copies.
	out := make([]*structs.Leftover, len(leftovers))
	for i, l := range leftovers {
		c := *l
		out[i] = &c
	}
	return out, nil
}

func (w *writer) upsertAllocs(r *structs.AllocUpsertRequest) (any, error) {
	var ended []string
	for _, in := range r.Allocs {
		a := in.Copy()
		internAlloc(a)
		old, err := w.snap.AllocByID(nil, a.ID)
		if err != nil {
			return nil, err
		}
		a.CreateIndex = w.index
		if old != nil {
			a.CreateIndex = old.CreateIndex
		}
		a.ModifyIndex = w.index
		if a.ModifyTime.IsZero() {
			a.ModifyTime = w.now
		}
		if err := w.insert(TableAllocs, a); err != nil {
			return nil, err
		}
		if a.ClientStatus.Terminal() && (old == nil || !old.ClientStatus.Terminal()) {
			ended = append(ended, a.ID)
		}
	}
	return nil, w.allocsEnded(ended)
}

// allocsEnded wakes the volumes claimed by allocations that became terminal
// or were deleted: their claims are now releasable.
func (w *writer) allocsEnded(ids []string) error {
	seen := map[string]bool{}
	var vols []*structs.Volume
	for _, id := range ids {
		vs, err := w.snap.VolumesClaimedByAlloc(nil, id)
		if err != nil {
			return err
		}
		for _, v := range vs {
			if k := volName(v.Namespace, v.ID); !seen[k] {
				seen[k] = true
				vols = append(vols, v)
			}
		}
	}
	return w.touchVolumes(vols)
}

func (w *writer) deleteAllocs(r *structs.AllocDeleteRequest) (any, error) {
	for _, id := range r.AllocIDs {
		a, err := w.snap.AllocByID(nil, id)
		if err != nil {
			return nil, err
		}
		if err := w.delete(TableAllocs, a); err != nil {
			return nil, err
		}
	}
	return nil, w.allocsEnded(r.AllocIDs)
}

func claimFields(c *structs.Claim) map[string]string {
	f := map[string]string{"state": string(c.State), "attempts": strconv.Itoa(c.Attempts)}
	if c.LastError != nil {
		f["error"] = c.LastError.Error()
		if c.LastError.CodeName != "" {
			f["code"] = c.LastError.CodeName
		}
	}
	if c.FenceReason != "" {
		// The node steps were skipped: the node is attested off (fenced).
		f["fence_reason"] = c.FenceReason
	}
	return f
}

func (w *writer) claimVolume(r *structs.VolumeClaimRequest) (any, error) {
	old, err := w.snap.VolumeByID(nil, r.Namespace, r.VolumeID)
	if err != nil {
		return nil, err
	}
	v := old.Copy()
	c := r.Claim.Copy()
	internClaim(c)
	if c.State == "" {
		c.State = structs.ClaimTaken
	}
	c.DefaultModes(v)
	if c.CreateTime.IsZero() {
		c.CreateTime = w.now
	}
	if c.ModifyTime.IsZero() {
		c.ModifyTime = c.CreateTime
	}
	c.CreateIndex, c.ModifyIndex = w.index, w.index
	if err := w.recordPublish(v, c); err != nil {
		return nil, err
	}
	if prev := v.Claims[c.AllocID]; prev != nil {
		// A publishing record confirmed taken (validateClaimOverPublishing):
		// the same claim, created when it was written ahead.
		c.CreateIndex, c.CreateTime = prev.CreateIndex, prev.CreateTime
	}
	if v.Claims == nil {
		v.Claims = map[string]*structs.Claim{}
	}
	v.Claims[c.AllocID] = c
	v.ModifyIndex = w.index
	if err := w.putVolume(old, v); err != nil {
		return nil, err
	}
	return nil, w.event(&structs.Event{
		Type: structs.EventClaimTransition, Namespace: v.Namespace, VolumeID: v.ID,
		AllocID: c.AllocID, NodeID: c.NodeID, PluginID: v.PluginID,
		Message: fmt.Sprintf("claim %s (%s)", c.State, c.Mode), Fields: claimFields(c),
	})
}

// dropClaim removes a claim from v (a copy) and clears the volume's stuck
// mark when no claim is left: stuck is about claims that cannot be released.
func dropClaim(v *structs.Volume, allocID string) {
	delete(v.Claims, allocID)
	if len(v.Claims) == 0 {
		v.Claims = nil
		v.Stuck = nil
	}
}

func (w *writer) removeClaim(r *structs.VolumeClaimRemoveRequest) (any, error) {
	old, err := w.snap.VolumeByID(nil, r.Namespace, r.VolumeID)
	if err != nil {
		return nil, err
	}
	v := old.Copy()
	c := v.Claims[r.AllocID]
	dropClaim(v, r.AllocID)
	v.ModifyIndex = w.index
	if err := w.putVolume(old, v); err != nil {
		return nil, err
	}
	return nil, w.event(&structs.Event{
		Type: structs.EventClaimTransition, Namespace: v.Namespace, VolumeID: v.ID,
		AllocID: r.AllocID, NodeID: c.NodeID, PluginID: v.PluginID,
		Message: fmt.Sprintf("claim removed at %s without release", c.State), Fields: claimFields(c),
	})
}

func (w *writer) checkpointClaim(r *structs.ClaimCheckpointRequest) (any, error) {
	old, err := w.snap.VolumeByID(nil, r.Namespace, r.VolumeID)
	if err != nil {
		return nil, err
	}
	v := withNewClaims(old)
	prev := v.Claims[r.Claim.AllocID]
	c := r.Claim.Copy()
	internClaim(c)
	c.CreateIndex = prev.CreateIndex
	c.ModifyIndex = w.index
	if c.CreateTime.IsZero() {
		c.CreateTime = prev.CreateTime
	}
	if c.ModifyTime.IsZero() {
		c.ModifyTime = w.now
	}
	if c.AccessMode == "" {
		c.AccessMode = prev.AccessMode
	}
	if c.AttachmentMode == "" {
		c.AttachmentMode = prev.AttachmentMode
	}
	keepPublishRecord(prev, c)
	evs := []*structs.Event{claimTransition(v, prev, c)}
	if r.Free {
		// Freed in the same write (structs.ClaimCheckpointRequest.Free):
		// the second transition starts from the claim just written.
		// f only says ready-to-free for the event: the claim leaves v in
		// this transition, so f is never stored and may share c's maps.
		f := *c
		f.State = structs.ClaimReadyToFree
		evs = append(evs, claimTransition(v, c, &f))
	}
	v.ModifyIndex = w.index
	if err := w.putVolume(old, v); err != nil {
		return nil, err
	}
	for _, ev := range evs {
		if err := w.event(ev); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// withNewClaims copies v for a write that replaces or removes whole claims
// and sets the volume's own scalar fields, nothing else: a stored object is
// never changed in place (memdb's readers share it), so what the write
// does not replace (the other claims, the maps and slices) is shared with
// v, and only the claims map is new. A checkpoint copied the whole volume,
// every claim included, twice per release (BenchmarkReleaseWrites).
func withNewClaims(v *structs.Volume) *structs.Volume {
	n := *v
	n.Claims = maps.Clone(v.Claims)
	return &n
}

// claimTransition writes c over prev into v (a copy being written) and
// returns the event that says what happened: a transition (the claim
// leaves v at ready-to-free), a hold or a failed attempt.
func claimTransition(v *structs.Volume, prev, c *structs.Claim) *structs.Event {
	ev := &structs.Event{
		Type: structs.EventClaimTransition, Namespace: v.Namespace, VolumeID: v.ID,
		AllocID: c.AllocID, NodeID: c.NodeID, PluginID: v.PluginID, Fields: claimFields(c),
	}
	switch {
	case c.State == structs.ClaimReadyToFree:
		// The claim stops counting for capacity only now, so no replacement
		// is placed before the controller detach (hashicorp/nomad#8609),
		// and leaves the volume in the same write.
		dropClaim(v, c.AllocID)
		ev.Message = fmt.Sprintf("claim %s -> %s: released and removed", prev.State, c.State)
	case c.State != prev.State:
		v.Claims[c.AllocID] = c
		ev.Message = fmt.Sprintf("claim %s -> %s", prev.State, c.State)
	case c.NodeUnpublished && !prev.NodeUnpublished:
		v.Claims[c.AllocID] = c
		ev.Fields["node_unpublished"] = "true"
		ev.Message = fmt.Sprintf("claim %s: NodeUnpublish done, NodeUnstage next", c.State)
	case c.Hold != nil && (c.Attempts == 0 || c.Attempts == prev.Attempts):
		// Held with no new attempt: after a failed attempt too (its node
		// went down or gone), the news is the hold. Read as a failure, each
		// node status change re-announced the last "attempt N failed"
		// with N unchanged.
		v.Claims[c.AllocID] = c
		ev.Type = structs.EventClaimHeld
		ev.Module = c.Hold.Module
		ev.Message = fmt.Sprintf("claim held at %s by %s: %s", c.State, c.Hold.Holder(), c.Hold.Reason)
	case c.Attempts > 0 && c.Attempts == prev.Attempts:
		// No new attempt and no hold: a hold lifted, or the claim's
		// bookkeeping changed. Not a failure either.
		v.Claims[c.AllocID] = c
		ev.Message = fmt.Sprintf("claim at %s: ready for attempt %d", c.State, c.Attempts+1)
		if prev.Hold != nil {
			ev.Message = fmt.Sprintf("claim at %s: hold by %s lifted, attempt %d next", c.State, prev.Hold.Holder(), c.Attempts+1)
		}
	default:
		v.Claims[c.AllocID] = c
		ev.Type = structs.EventClaimFailed
		ev.Message = fmt.Sprintf("claim release attempt %d failed at %s", c.Attempts, c.State)
	}
	ev.Fields["from"] = string(prev.State)
	return ev
}

func (w *writer) markStuck(r *structs.VolumeStuckRequest) (any, error) {
	old, err := w.snap.VolumeByID(nil, r.Namespace, r.VolumeID)
	if err != nil {
		return nil, err
	}
	v := old.Copy()
	ev := &structs.Event{Type: structs.EventVolumeStuck, Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID}
	if r.Stuck == nil {
		if v.Stuck == nil {
			return nil, nil // nothing to clear
		}
		v.Stuck = nil
		ev.Message = "volume no longer stuck"
	} else {
		s := *r.Stuck
		if s.Since.IsZero() {
			s.Since = w.now
		}
		v.Stuck = &s
		ev.AllocID, ev.NodeID, ev.Module = s.AllocID, s.NodeID, s.Module
		ev.Message = "volume stuck: " + s.Reason
		ev.Fields = map[string]string{"attempts": strconv.Itoa(s.Attempts)}
		if s.CodeName != "" {
			ev.Fields["code"] = s.CodeName
		}
		if s.Fault != "" {
			ev.Fields["fault"] = s.Fault
		}
	}
	v.ModifyIndex = w.index
	if err := w.putVolume(old, v); err != nil {
		return nil, err
	}
	return nil, w.event(ev)
}

func (w *writer) gcClaims(r *structs.ClaimGCRequest) (any, error) {
	var vols []*structs.Volume
	seen := map[structs.VolumeRef]bool{}
	for _, ref := range r.Volumes {
		if seen[ref] {
			continue
		}
		seen[ref] = true
		v, err := w.snap.VolumeByID(nil, ref.Namespace, ref.ID)
		if err != nil {
			return nil, err
		}
		if v != nil { // deregistered since the GC looked: nothing to wake
			vols = append(vols, v)
		}
	}
	if err := w.touchVolumes(vols); err != nil {
		return nil, err
	}
	// One event per GC pass, not per volume, so a large pass does not wipe
	// the bounded events table.
	return nil, w.event(&structs.Event{
		Type:    structs.EventGC,
		Message: fmt.Sprintf("claim GC woke %d volume(s)", len(vols)),
		Fields:  map[string]string{"volumes": strconv.Itoa(len(vols))},
	})
}

func (w *writer) clearLeftovers(r *structs.LeftoversClearRequest) (any, error) {
	if r.All {
		n, err := w.txn.DeleteAll(TableLeftovers, indexID)
		if err != nil {
			return nil, fmt.Errorf("delete leftovers: %w", err)
		}
		if n > 0 {
			w.bumped[TableLeftovers] = true
		}
		return nil, nil
	}
	for _, id := range r.IDs {
		raw, err := w.txn.First(TableLeftovers, indexID, id)
		if err != nil {
			return nil, fmt.Errorf("read leftover: %w", err)
		}
		if raw == nil {
			continue // named twice in one request
		}
		if err := w.delete(TableLeftovers, raw); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (w *writer) appendEvents(r *structs.EventAppendRequest) (any, error) {
	for _, in := range r.Events {
		e := *in
		if in.Fields != nil {
			e.Fields = make(map[string]string, len(in.Fields))
			for k, v := range in.Fields {
				e.Fields[k] = v
			}
		}
		if err := w.event(&e); err != nil {
			return nil, err
		}
	}
	return nil, nil
}
