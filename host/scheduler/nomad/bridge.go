package nomad

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// SourceName is the bridge's scheduler.Source name: the Source of the
// allocations it mirrors and the key of its cursor.
const SourceName = "nomad"

// claimWorkers bounds the claims the bridge runs at once (each publishes
// through CSI; the claim path serialises per volume anyway).
const claimWorkers = 2

// Bridge is the Nomad scheduler.Source.
type Bridge struct {
	s     Settings
	nomad Nomad
	w     scheduler.Writer
	store *state.Store
	log   hclog.Logger
	clock clockwork.Clock

	mu       sync.Mutex
	st       scheduler.Status
	problems map[string]scheduler.Problem
	held     int
}

// Deps are what a Bridge reads and writes.
type Deps struct {
	Nomad  Nomad // nil: the api client for the settings
	Writer scheduler.Writer
	Store  *state.Store
	Logger hclog.Logger
	Clock  clockwork.Clock
}

// New returns a bridge; nothing runs until Run.
func New(s Settings, d Deps) (*Bridge, error) {
	if d.Nomad == nil {
		c, err := NewClient(s)
		if err != nil {
			return nil, err
		}
		d.Nomad = c
	}
	if d.Logger == nil {
		d.Logger = hclog.NewNullLogger()
	}
	if d.Clock == nil {
		d.Clock = clockwork.NewRealClock()
	}
	b := &Bridge{s: s, nomad: d.Nomad, w: d.Writer, store: d.Store, log: d.Logger.Named("scheduler.nomad"), clock: d.Clock,
		problems: map[string]scheduler.Problem{}}
	b.st = scheduler.Status{Source: SourceName, Address: s.ShownAddress(), State: scheduler.StateStopped}
	return b, nil
}

// Name implements scheduler.Source.
func (b *Bridge) Name() string { return SourceName }

// run is one leadership's bookkeeping; only the Run goroutine touches it.
type run struct {
	term   uint64
	nodes  map[string]Node     // Nomad nodes by ID, as last listed or streamed
	allocs map[string]*tracked // Nomad allocations seen, by ID
	// allocsListed is the allocation list's index at the last re-list:
	// the stream starts at the older of the two lists' index + 1, so it
	// replays allocation changes the list already holds, or that Nomad
	// has collected since (an allocation that ran and ended before the
	// list). An allocation event at or below it is not news: replayed, an
	// ended allocation's earlier "running" was mirrored and its volume
	// claimed.
	allocsListed uint64
	applied      uint64 // the Nomad index committed as the cursor
	seen         uint64 // the highest Nomad index applied in memory
	stream       uint64 // the last stream batch's index (a lower one is a reset)

	pendingAllocs map[string]*structs.Alloc
	pendingEvents []*structs.Event
	wantClaims    []string // allocation IDs whose claims to check after the commit
	// forgets are the allocations a pending status ends: forgotten once
	// it commits, judged again (tracked.rejudge) if it does not.
	forgets []string
	// unmirrored holds the Nomad index of each allocation change that
	// could not be mirrored (its job's meta unreadable, its node unknown
	// to volhost): the cursor stays below the lowest, or it said the
	// change was mirrored. A re-list observes every allocation again and
	// starts it afresh.
	unmirrored map[string]uint64

	claims   chan claimJob
	results  chan claimResult
	inflight map[string]bool
	lastErr  string // the last connection error recorded as an event

	// nodesMoved fires when volhost's nodes table changes (a fence, a
	// node agent's status): held allocations are judged again. Armed for
	// the whole run, across sessions and backoffs, and armed again only
	// once it fires, before the change is handled (armNodesWatch).
	nodesMoved <-chan struct{}
	unwatch    context.CancelFunc
}

// tracked is what the bridge knows of one Nomad allocation.
type tracked struct {
	a       Alloc
	vols    []volumeRequest
	ignored bool // declares no volhost volume
	held    bool
	// rejudge: judged again when volhost's nodes move or the backoff
	// waits (reheld), like a held one: its node was unknown to volhost, or
	// the commit of what was decided for it failed.
	rejudge bool
}

// Run implements scheduler.Source.
func (b *Bridge) Run(ctx context.Context, term uint64) error {
	r := &run{term: term, nodes: map[string]Node{}, allocs: map[string]*tracked{},
		claims: make(chan claimJob, 1024), results: make(chan claimResult, 1024), inflight: map[string]bool{}}
	b.mu.Lock()
	b.st.State, b.st.LeaderTerm, b.st.StartTime, b.st.Claims = scheduler.StateConnecting, term, b.clock.Now(), 0
	b.problems, b.held = map[string]scheduler.Problem{}, 0 // this run's, not the last leadership's
	b.mu.Unlock()
	var wg sync.WaitGroup
	for range claimWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.claimWorker(ctx, r)
		}()
	}
	b.armNodesWatch(ctx, r)
	defer func() {
		r.unwatch()
		close(r.claims)
		wg.Wait()
		b.mu.Lock()
		b.st.State, b.st.LeaderTerm, b.held = scheduler.StateStopped, 0, 0
		b.mu.Unlock()
	}()
	if cur, err := b.store.Snapshot().SchedulerCursor(nil, SourceName); err == nil && cur != nil {
		r.applied = cur.Index
		b.log.Info("resuming from the committed Nomad index", "index", cur.Index)
	}
	backoff := time.Second
	for ctx.Err() == nil {
		streamed, err := b.session(ctx, r)
		if ctx.Err() != nil {
			break
		}
		if streamed {
			backoff = time.Second
		}
		b.failed(ctx, r, err)
		if !b.wait(ctx, r, backoff) {
			break
		}
		backoff = min(2*backoff, b.s.RetryMax)
	}
	return nil
}

// wait sleeps d (the backoff), still handling claim results.
func (b *Bridge) wait(ctx context.Context, r *run, d time.Duration) bool {
	t := b.clock.NewTimer(d)
	defer t.Stop()
	if b.rejudging(r) {
		// What the failed session decided and could not commit (a
		// fence's release among it) needs nothing from Nomad.
		b.rejudge(ctx, r)
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.Chan():
			return true
		case res := <-r.results:
			b.claimed(ctx, r, res)
		case <-r.nodesMoved:
			// A fence needs nothing from Nomad to release what it held.
			b.armNodesWatch(ctx, r)
			b.rejudge(ctx, r)
		}
	}
}

// rejudge runs reheld outside a session (the backoff); what it could not
// commit is dropped and judged again, as a session's failure is.
func (b *Bridge) rejudge(ctx context.Context, r *run) {
	if err := b.reheld(ctx, r, false); err != nil {
		b.log.Warn("judging held allocations again", "error", err)
		b.dropUncommitted(r)
	}
}

// rejudging reports whether an allocation waits to be judged again.
func (b *Bridge) rejudging(r *run) bool {
	for _, t := range r.allocs {
		if t.rejudge {
			return true
		}
	}
	return false
}

// dropUncommitted forgets what a failed commit left pending: what Nomad
// says is listed again on the next session, and the allocations it would
// have ended are judged again (tracked.rejudge) when volhost's nodes move
// or the backoff waits. Kept, an allocation Nomad stopped and collected
// meanwhile was committed running by the next batch and its volume
// claimed; and a fence's release whose commit failed was committed after
// the operator lifted the fence. Nor does the cursor pass what was not
// committed: the next commit's index is the last committed, not the
// failed batch's (which said that batch was mirrored).
func (b *Bridge) dropUncommitted(r *run) {
	for _, id := range r.forgets {
		if t := r.allocs[id]; t != nil {
			t.rejudge = true // what would have ended it, judged again
		}
	}
	r.pendingAllocs, r.wantClaims, r.forgets, r.seen = nil, nil, nil, r.applied
}

// errStreamReset: the event stream's index went backwards.
var errStreamReset = errors.New("the Nomad event stream's index went backwards: Nomad's state was reset; listing again")

// session lists, then follows the event stream until it fails. streamed
// says the stream was reached (the backoff starts over).
func (b *Bridge) session(ctx context.Context, r *run) (streamed bool, err error) {
	b.setState(scheduler.StateConnecting)
	from, err := b.relist(ctx, r)
	if err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := b.nomad.Stream(sctx, from)
	if err != nil {
		return false, err
	}
	r.stream = 0
	b.setState(scheduler.StateStreaming)
	b.clearError(ctx, r)
	relist := b.clock.NewTicker(b.s.Relist)
	defer relist.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case batch, ok := <-ch:
			if !ok {
				return true, errors.New("the Nomad event stream closed")
			}
			if batch.Err != nil {
				return true, batch.Err
			}
			if err := b.applyBatch(ctx, r, batch); err != nil {
				return true, err
			}
		case <-relist.Chan():
			if _, err := b.relist(ctx, r); err != nil {
				return true, err
			}
		case res := <-r.results:
			b.claimed(ctx, r, res)
		case <-r.nodesMoved:
			b.armNodesWatch(ctx, r)
			// A fence (or a node agent's status) moved: held allocations
			// may be released now.
			if err := b.reheld(ctx, r, true); err != nil {
				return true, err
			}
		}
	}
}

// armNodesWatch arms r.nodesMoved on the nodes table as it stands now,
// ending the watch before it. Armed anew at each event of a session, on
// a snapshot taken after the event was handled, a fence committed while a
// batch, a claim's answer, the opening re-list or a backoff was handled
// was already in that snapshot and never fired it: the allocations it
// releases stayed held until the next periodic re-list.
func (b *Bridge) armNodesWatch(ctx context.Context, r *run) {
	if r.unwatch != nil {
		r.unwatch()
	}
	wctx, cancel := context.WithCancel(ctx)
	r.unwatch = cancel
	ws := memdb.NewWatchSet()
	if _, err := b.store.Snapshot().IndexWatch(ws, state.TableNodes); err != nil {
		r.nodesMoved = nil // never fires: the next re-list judges the holds
		return
	}
	ch := make(chan struct{})
	go func() {
		if ws.WatchCtx(wctx) == nil {
			close(ch)
		}
	}()
	r.nodesMoved = ch
}

// applyBatch applies one index of the event stream.
func (b *Bridge) applyBatch(ctx context.Context, r *run, batch Batch) error {
	if batch.Index < r.stream {
		return errStreamReset
	}
	r.stream = batch.Index
	b.mu.Lock()
	b.st.LastEvent = b.clock.Now()
	b.mu.Unlock()
	for _, n := range batch.Nodes {
		if err := b.observeNode(ctx, r, n, nil); err != nil {
			return err
		}
	}
	snap := b.store.Snapshot()
	for _, a := range batch.Allocs {
		if a.ModifyIndex <= r.allocsListed {
			continue // the list holds it, or a later state
		}
		b.observe(ctx, r, snap, a)
	}
	r.seen = max(r.seen, batch.Index)
	return b.commit(ctx, r, false, false)
}

// relist lists Nomad's nodes and allocations and applies them whole: a
// node that vanished is gone, an allocation that vanished has ended. It
// returns the index to stream from.
func (b *Bridge) relist(ctx context.Context, r *run) (uint64, error) {
	nodes, nIdx, err := b.nomad.Nodes(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing Nomad nodes at %s: %w", b.s.ShownAddress(), err)
	}
	allocs, aIdx, err := b.nomad.Allocs(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing Nomad allocations at %s: %w", b.s.ShownAddress(), err)
	}
	index := max(nIdx, aIdx)
	why := historyChanged(r, nodes, nIdx, allocs, aIdx)
	if index < r.applied {
		why = fmt.Sprintf("Nomad's index went back from %d to %d", r.applied, index)
	}
	reset := why != ""
	if reset {
		// A Nomad that lost its state (a dev agent restarted) starts its
		// indexes again, and one rebuilt from a snapshot starts them from
		// the snapshot's: nothing known by index is comparable any more.
		r.pendingEvents = append(r.pendingEvents, b.event("", "", why+": its state was reset; everything is listed again"))
		b.log.Warn("Nomad's state was reset", "why", why, "cursor", r.applied, "now", index)
		r.nodes, r.allocs, r.seen = map[string]Node{}, map[string]*tracked{}, 0
		b.setHeld(r)
	}
	listed := make(map[string]Node, len(nodes))
	for _, n := range nodes {
		listed[n.ID] = n
	}
	for id, n := range r.nodes {
		if _, ok := listed[id]; !ok {
			delete(r.nodes, id)
			if err := b.nodeGone(ctx, r, n, listed); err != nil {
				return 0, err
			}
		}
	}
	for _, n := range nodes {
		if err := b.observeNode(ctx, r, n, listed); err != nil {
			return 0, err
		}
	}
	snap := b.store.Snapshot()
	r.unmirrored = nil // each listed allocation is observed again
	inList := make(map[string]bool, len(allocs))
	for _, a := range allocs {
		inList[a.ID] = true
		b.observe(ctx, r, snap, a)
	}
	if err := b.vanished(ctx, r, snap, inList); err != nil {
		return 0, err
	}
	b.forgetUnlisted(r, snap, inList)
	r.allocsListed = aIdx
	r.seen = max(r.seen, index)
	if reset {
		r.seen = index
	}
	if err := b.commit(ctx, r, reset, true); err != nil {
		return 0, err
	}
	b.mu.Lock()
	b.st.LastList, b.st.Nodes = b.clock.Now(), len(r.nodes)
	b.mu.Unlock()
	return min(nIdx, aIdx) + 1, nil
}

// historyChanged names a listed node or allocation older than the one
// this run saw before although the list is at or past that one's index:
// no list of Nomad's history can show that, so its history changed (a
// cluster rebuilt from a snapshot, whose indexes went on past volhost's
// cursor before this list: the cursor alone does not see it). Kept, the
// bridge's memory dropped every later report of those objects as an older
// replay: an allocation's completion was never mirrored and its claims
// never released. "" when nothing is.
func historyChanged(r *run, nodes []Node, nIdx uint64, allocs []Alloc, aIdx uint64) string {
	for _, n := range nodes {
		if old, ok := r.nodes[n.ID]; ok && n.ModifyIndex < old.ModifyIndex && nIdx >= old.ModifyIndex {
			return fmt.Sprintf("Nomad lists node %s at index %d, below the %d seen before", n.ID, n.ModifyIndex, old.ModifyIndex)
		}
	}
	for _, a := range allocs {
		if t := r.allocs[a.ID]; t != nil && a.ModifyIndex < t.a.ModifyIndex && aIdx >= t.a.ModifyIndex {
			return fmt.Sprintf("Nomad lists allocation %s at index %d, below the %d seen before", a.ID, a.ModifyIndex, t.a.ModifyIndex)
		}
	}
	return ""
}

// nodeOfVanished is the Nomad node a vanished allocation of volhost node
// id is judged by (vanished): of those that map to it, one that is not
// ready if any (the allocation is held), else the first by ID.
func (b *Bridge) nodeOfVanished(r *run, id string) (Node, bool) {
	var best Node
	found := false
	for _, n := range r.nodes {
		if volhostNodeID(b.s.NodeID, n.ID, n.Name) != id {
			continue
		}
		if !found || readyRank(n) < readyRank(best) || readyRank(n) == readyRank(best) && n.ID < best.ID {
			best, found = n, true
		}
	}
	return best, found
}

// readyRank orders a node that is not ready first.
func readyRank(n Node) int {
	if n.Status == nodeReady {
		return 1
	}
	return 0
}

// vanished ends the mirrored allocations Nomad no longer lists: it
// garbage-collects only ended allocations, or those of a node it removed.
// One whose node is down and not fenced is held like a lost one (decide,
// clientVanished).
func (b *Bridge) vanished(ctx context.Context, r *run, snap *state.Snapshot, inList map[string]bool) error {
	all, err := snap.Allocs(nil)
	if err != nil {
		return err
	}
	for _, va := range all {
		if va.Source != SourceName || va.ClientStatus.Terminal() || inList[va.ID] {
			continue
		}
		if !b.s.Mirrors(va.Namespace) {
			// Not listed because its namespace left the configuration,
			// not because Nomad dropped it: it may run. Left as it is.
			b.problem(r, "alloc/"+va.ID, va.ID, va.NodeID, fmt.Sprintf(
				"allocation %s is in Nomad namespace %q, which the bridge no longer mirrors (namespaces = %q): it is left as it was, its claims kept; add the namespace back to have it followed",
				va.ID, va.Namespace, b.s.Namespaces))
			continue
		}
		a := Alloc{ID: va.ID, Namespace: va.Namespace, JobID: va.JobID, ClientStatus: clientVanished}
		t := r.allocs[va.ID]
		if t != nil {
			a = t.a
			a.ClientStatus = clientVanished
		} else {
			// Not seen in this leadership: find its Nomad node by the
			// volhost node it maps to. When several do (a machine
			// reinstalled under a new Nomad node ID, the old one still
			// listed), one that is not ready is the one it ran on as far
			// as the bridge can tell: judged by a ready one, an
			// allocation lost on a down machine was released at random.
			a.NodeID, a.NodeName = va.NodeID, va.NodeID
			if n, ok := b.nodeOfVanished(r, va.NodeID); ok {
				a.NodeID, a.NodeName = n.ID, n.Name
			}
		}
		// Tracked as vanished: a hold is judged again when its node is
		// fenced or back (reheld), and must be judged vanished then, not
		// as the running it was last listed (or not at all, for one this
		// leadership never saw listed).
		if t == nil {
			t = &tracked{}
			r.allocs[va.ID] = t
		}
		t.a = a
		b.log.Info("allocation vanished from Nomad", "alloc", va.ID, "node", va.NodeID)
		b.apply(r, snap, va, a, "vanished from Nomad")
	}
	return nil
}

// commit writes what is pending with the cursor. A batch that changed
// nothing moves the cursor only on a re-list (or a reset): a log write per
// Nomad event, most of them about allocations without volhost volumes,
// would cost more than replaying those events after a leader change,
// which is idempotent.
func (b *Bridge) commit(ctx context.Context, r *run, reset, relist bool) error {
	index := max(r.seen, r.applied)
	if reset {
		index = r.seen
	}
	for _, at := range r.unmirrored {
		if reset {
			index = min(index, at-1) // a reset may move the cursor back
		} else {
			index = max(min(index, at-1), r.applied)
		}
	}
	if len(r.pendingAllocs) == 0 && len(r.pendingEvents) == 0 && !reset && !(relist && index > r.applied) {
		b.claimAll(r)
		return nil
	}
	req := &structs.SchedulerSyncRequest{Source: SourceName, Index: index, Reset: reset, Events: r.pendingEvents,
		Time: b.clock.Now(), Term: r.term}
	for _, a := range r.pendingAllocs {
		req.Allocs = append(req.Allocs, a)
	}
	sortAllocs(req.Allocs)
	if _, err := b.w.SchedulerSync(ctx, req); err != nil {
		return fmt.Errorf("committing Nomad changes up to index %d: %w", index, err)
	}
	r.applied = index
	r.pendingAllocs, r.pendingEvents = nil, nil
	for _, id := range r.forgets {
		b.forget(r, id)
	}
	r.forgets = nil
	b.mu.Lock()
	b.st.Index = index
	b.mu.Unlock()
	b.claimAll(r)
	return nil
}

func (b *Bridge) setState(s string) {
	b.mu.Lock()
	b.st.State = s
	b.mu.Unlock()
}

// failed records a connection or commit error: on the status line always,
// as an event only when it differs from the last one recorded (no log
// write per retry).
func (b *Bridge) failed(ctx context.Context, r *run, err error) {
	msg := err.Error()
	b.log.Error("Nomad bridge", "error", msg)
	b.mu.Lock()
	b.st.State, b.st.LastError, b.st.ErrorTime = scheduler.StateRetrying, msg, b.clock.Now()
	b.st.Failures++
	b.mu.Unlock()
	b.dropUncommitted(r)
	// One event per cause: the same refusal reached through the list or
	// the stream is one incident.
	cause := rootCause(err)
	if cause == r.lastErr || errors.Is(err, structs.ErrStaleTerm) || errors.Is(err, structs.ErrNoLeader) {
		return
	}
	r.lastErr = cause
	r.pendingEvents = append(r.pendingEvents, b.event("", "", "Nomad bridge: "+msg))
	if err := b.commit(ctx, r, false, false); err != nil {
		b.log.Warn("could not record the bridge's error as an event", "error", err)
	}
}

// rootCause is the innermost error's message.
func rootCause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// clearError: the stream is up again.
func (b *Bridge) clearError(ctx context.Context, r *run) {
	b.mu.Lock()
	had := b.st.LastError != ""
	b.st.LastError, b.st.ErrorTime, b.st.Failures = "", time.Time{}, 0
	b.mu.Unlock()
	if had && r.lastErr != "" {
		r.lastErr = ""
		r.pendingEvents = append(r.pendingEvents, b.event("", "", "Nomad bridge: connected to "+b.s.ShownAddress()+" again"))
		if err := b.commit(ctx, r, false, false); err != nil {
			b.log.Warn("could not record the reconnection", "error", err)
		}
	}
}

func (b *Bridge) event(allocID, nodeID, msg string) *structs.Event {
	return &structs.Event{Type: structs.EventScheduler, AllocID: allocID, NodeID: nodeID, Message: msg, Time: b.clock.Now(),
		Fields: map[string]string{"source": SourceName}}
}
