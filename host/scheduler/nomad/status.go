package nomad

import (
	"slices"
	"strings"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/state"
)

// maxProblems bounds the problem lines kept (each is also an event).
const maxProblems = 100

// problem records a problem line under key. It queues an event (committed
// with the next batch) when the problem is new or its message changed,
// and reports whether it did: a problem that lasts is one event, not one
// per event or re-list.
func (b *Bridge) problem(r *run, key, allocID, nodeID, msg string) bool {
	b.mu.Lock()
	old, ok := b.problems[key]
	if ok && old.Message == msg {
		b.mu.Unlock()
		return false
	}
	if !ok && len(b.problems) >= maxProblems {
		b.mu.Unlock()
		b.log.Warn(msg)
		return false
	}
	b.problems[key] = scheduler.Problem{Key: key, Message: msg, Since: b.clock.Now()}
	b.mu.Unlock()
	b.log.Warn(msg)
	r.pendingEvents = append(r.pendingEvents, b.event(allocID, nodeID, msg))
	return true
}

// solveUnknownNode drops the problem line of a node volhost does not know
// once no tracked allocation waits on it (tracked.rejudge): the last one
// forgotten (ended, or collected by Nomad) left it up for good.
func (b *Bridge) solveUnknownNode(r *run, nodeID string) {
	if nodeID == "" {
		return
	}
	for _, t := range r.allocs {
		if t.rejudge && volhostNodeID(b.s.NodeID, t.a.NodeID, t.a.NodeName) == nodeID {
			return
		}
	}
	b.solved("node/" + nodeID)
}

// forgetUnlisted forgets, at a re-list, the allocations Nomad no longer
// lists that volhost never mirrored (vanished ends the mirrored ones):
// those the bridge tracks (their node unknown to volhost) and those it
// only has a problem line about (their job's meta unreadable). Kept, a
// tracked one was judged again from the "running" last seen once its
// node registered, mirrored and claimed; and the problem lines stayed
// until the next leadership.
func (b *Bridge) forgetUnlisted(r *run, snap *state.Snapshot, inList map[string]bool) {
	ids := make(map[string]bool, len(r.allocs))
	for id := range r.allocs {
		ids[id] = true
	}
	b.mu.Lock()
	for k := range b.problems {
		if id, ok := strings.CutPrefix(k, "alloc/"); ok {
			id, _, _ = strings.Cut(id, "/")
			ids[id] = true
		}
	}
	b.mu.Unlock()
	for id := range ids {
		if inList[id] {
			continue
		}
		if va, err := snap.AllocByID(nil, id); err == nil && va == nil {
			b.forget(r, id)
		}
	}
}

// solved drops the problem under key.
func (b *Bridge) solved(key string) {
	b.mu.Lock()
	delete(b.problems, key)
	b.mu.Unlock()
}

// forget drops an allocation the bridge no longer follows (it ended) and
// its problem lines.
func (b *Bridge) forget(r *run, id string) {
	t := r.allocs[id]
	if t != nil && t.held {
		t.held = false
		defer b.setHeld(r)
	}
	delete(r.allocs, id)
	delete(r.unmirrored, id)
	// Nor is anything still pending for it: a running and a complete in
	// one batch, the first pending, the second forgetting, committed the
	// running and moved the cursor past the complete.
	delete(r.pendingAllocs, id)
	r.wantClaims = slices.DeleteFunc(r.wantClaims, func(w string) bool { return w == id })
	if t != nil && t.rejudge {
		// Only an allocation waiting to be judged again can hold an
		// unknown node's problem line up: every other completion skips
		// the scan of what is tracked.
		b.solveUnknownNode(r, volhostNodeID(b.s.NodeID, t.a.NodeID, t.a.NodeName))
	}
	b.mu.Lock()
	for k := range b.problems {
		if strings.HasPrefix(k, "alloc/"+id+"/") || k == "alloc/"+id || k == "held/"+id {
			delete(b.problems, k)
		}
	}
	b.mu.Unlock()
}

// Status implements scheduler.Source: the connection state, the committed
// cursor, counts of the allocations mirrored (from committed state) and
// the current problem lines.
func (b *Bridge) Status() scheduler.Status {
	b.mu.Lock()
	st := b.st
	st.Held = b.held
	for _, p := range b.problems {
		st.Problems = append(st.Problems, p)
	}
	b.mu.Unlock()
	slices.SortFunc(st.Problems, func(x, y scheduler.Problem) int { return strings.Compare(x.Key, y.Key) })
	snap := b.store.Snapshot()
	if cur, err := snap.SchedulerCursor(nil, SourceName); err == nil && cur != nil {
		st.Index, st.Resets = cur.Index, cur.Resets
	}
	if all, err := snap.Allocs(nil); err == nil {
		for _, a := range all {
			if a.Source != SourceName {
				continue
			}
			st.Allocs++
			if a.ClientStatus.Terminal() {
				st.Terminal++
			} else {
				st.Live++
			}
		}
	}
	return st
}

var _ scheduler.Source = (*Bridge)(nil)
