// Package watcher owns the leader-only volume watcher: it notices volumes
// whose claims can be released (a blocking query on the volumes table plus a
// full assessment on step-up), drives each claim through the release state
// machine (taken -> node-detached -> controller-detached -> ready-to-free)
// with per-claim backoff, detects stuck volumes, runs the claim GC and the
// operator's detach.
//
// It sees the store, the replicated log and the CSI plugins only through the
// interfaces in deps.go; release judgement comes from a Policy and an
// Adapter per volume (native built-ins or, later, Wasm modules), and every
// policy answer is validated by the host before anything is released.
//
// Modelled on Nomad's nomad/volumewatcher, minus its pains: no goroutine per
// volume (Nomad keeps one per volume until a 5 min quiescent timeout), no
// log writes to retry, cancellable CSI calls (hashicorp/nomad#10927), gRPC
// codes kept (hashicorp/nomad#27324).
package watcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// Deps are the watcher's views of the rest of the host.
type Deps struct {
	Feed   VolumeFeed
	State  StateReader
	Writer ClaimWriter
	// Node runs the node steps of nodes driven in direct mode.
	Node       attach.NodeRelease
	Controller ControllerCSI
	// Agents routes the node steps of nodes that registered through a
	// node agent; nil: no agent is ever connected.
	Agents attach.NodeAgents
	// Modules picks the policy and adapter per volume; nil serves the
	// native DefaultPolicy and SpecAdapter.
	Modules Modules
	// Leadership fences every CSI call by leadership term; nil runs
	// unfenced (tests of the watcher alone).
	Leadership Leadership
	// Locks is shared with the claim path (host/server); nil gives the
	// watcher its own.
	Locks *attach.VolumeLocks
}

// Watcher releases volume claims while enabled (on the leader).
type Watcher struct {
	cfg     Config
	deps    Deps
	mods    Modules
	clock   clockwork.Clock
	metrics Metrics
	logger  hclog.Logger
	ctl     *controllerLimiter
	locks   *attach.VolumeLocks
	// fenceAsks paces the questions to adapter modules about lost nodes
	// (confirmfence.go).
	fenceAsks fenceAsks

	// enableMu serialises SetEnabled so a step-down waits for the goroutines
	// of the step-up it undoes.
	enableMu sync.Mutex
	wg       sync.WaitGroup // every goroutine of the current enable

	mu      sync.Mutex
	enabled bool
	ctx     context.Context // cancelled on step-down
	cancel  context.CancelFunc
	term    uint64 // leadership term of the current enable (0: unfenced)
	vols    map[structs.VolumeRef]*volState
	pending refQueue
	workers int

	// feedIndex is the volumes-table index the loop has caught up with
	// (observability and tests).
	feedIndex atomic.Uint64
}

// volState is the bookkeeping of a volume the watcher has seen recently. It
// holds no goroutine: a wake-up or idle-drop is a clock timer.
type volState struct {
	queued  bool          // in w.pending
	running bool          // a pass (or a detach) holds the volume
	dirty   bool          // changed while running: run again after
	done    chan struct{} // closed when the running pass ends
	timer   clockwork.Timer
	seq     uint64 // invalidates fired timers that lost a race with Stop
	limiter *rate.Limiter
	fails   int // consecutive passes that failed to read or write state
	// read is the newest ModifyIndex a pass (or a detach) of the volume
	// has read (load).
	read uint64
}

// covers says whether the first answer of the blocking query, which
// lists the whole table after the step-up list, holds nothing for this
// listed volume that its pass has not read or will not read: its pass
// has not started (it reads this state or a newer one), or it read this
// index already. A volume changed since its pass read it runs again, as
// for any change: skipping every listed volume lost a change made while
// its step-up pass ran (the volume waited for the periodic claim GC), and
// re-running every listed one repeated a failed pass's CSI call at once,
// past its backoff.
func (st *volState) covers(index uint64) bool {
	return st.queued || index <= st.read
}

// changedVolume is a volume of the blocking query's answer that wants a
// pass, and the ModifyIndex the answer holds.
type changedVolume struct {
	ref   structs.VolumeRef
	index uint64
}

// New returns a disabled watcher; SetEnabled(true) starts it.
func New(cfg Config, deps Deps, logger hclog.Logger) *Watcher {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	mods := deps.Modules
	if mods == nil {
		mods = NativeModules()
	}
	locks := deps.Locks
	if locks == nil {
		locks = attach.NewVolumeLocks()
	}
	return &Watcher{
		cfg:     cfg,
		deps:    deps,
		mods:    mods,
		clock:   cfg.Clock,
		metrics: cfg.Metrics,
		logger:  logger.Named("volume_watcher"),
		ctl:     newControllerLimiter(cfg.ControllerConcurrency),
		locks:   locks,
	}
}

// Enabled reports whether the watcher is running (this server leads).
func (w *Watcher) Enabled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enabled
}

// SetEnabled starts the watcher on leadership step-up and stops it on
// step-down. Stopping cancels every in-flight CSI call and waits for all of
// the watcher's goroutines to exit, so a new leader term starts clean; work
// in progress is recovered from the checkpointed claims on the next enable.
func (w *Watcher) SetEnabled(enabled bool) {
	w.enableMu.Lock()
	defer w.enableMu.Unlock()

	w.mu.Lock()
	if w.enabled == enabled {
		w.mu.Unlock()
		return
	}
	if enabled {
		var term uint64
		if w.deps.Leadership != nil {
			// Every pass of this enable works under the term the step-up
			// was reported for; a term that has moved on fails each
			// ConfirmLeader and each checkpoint, so a late enable can do
			// no harm. No term at all (a step-down landed between the
			// step-up's signal and this enable) is no leadership: the
			// passes would stamp term 0 on checkpoints that need no CSI
			// call (holds, abandons), which nothing fences. The next
			// step-up's signal enables the watcher.
			if term = w.deps.Leadership.ReadyTerm(); term == 0 {
				w.mu.Unlock()
				w.logger.Info("step-up reported, but this server no longer leads: staying disabled until the next step-up")
				return
			}
		}
		w.enabled = true
		w.term = term
		w.ctx, w.cancel = context.WithCancel(context.Background())
		w.vols = make(map[structs.VolumeRef]*volState)
		w.pending = refQueue{}
		ctx := w.ctx
		w.wg.Add(2)
		w.mu.Unlock()
		w.logger.Info("enabled: assessing volumes")
		go w.watchVolumes(ctx)
		go w.gcLoop(ctx)
		return
	}
	w.enabled = false
	w.cancel()
	for _, st := range w.vols {
		st.stopTimerLocked()
	}
	w.vols = nil
	w.pending = refQueue{}
	w.mu.Unlock()
	w.wg.Wait()
	w.logger.Info("disabled")
}

// watchVolumes is the step-up assessment followed by the blocking query loop.
func (w *Watcher) watchVolumes(ctx context.Context) {
	defer w.wg.Done()

	// Step-up: every volume with a releasable claim is assessed, which
	// recovers releases a previous leader left half done (Nomad's
	// volumewatcher: its first query "reaps every volume" for this reason).
	var refs []structs.VolumeRef
	err := w.retry(ctx, "list releasable volumes", func() (err error) {
		refs, err = w.deps.State.ReleasableVolumes()
		return err
	})
	if err != nil {
		return
	}
	w.mu.Lock()
	for _, ref := range refs {
		w.enqueueLocked(ref)
	}
	w.mu.Unlock()
	w.logger.Debug("step-up assessment queued", "volumes", len(refs))

	var index uint64
	w.feedIndex.Store(0)
	first := true
	for {
		var vols []*structs.Volume
		var next uint64
		err := w.retry(ctx, "blocking query on volumes", func() (err error) {
			vols, next, err = w.deps.Feed.VolumesChangedSince(ctx, index)
			return err
		})
		if err != nil {
			return
		}
		if next < index {
			// The store was restored from an older snapshot: the feed
			// handed over every volume (a full assessment, as at
			// step-up) and the restored index to go on from.
			w.logger.Info("state restored: assessing every volume", "volumes", len(vols))
		}
		index = next
		changed := make([]changedVolume, 0, len(vols))
		for _, v := range vols {
			// Index 0 returns the whole table: of it, only volumes that
			// became releasable since the step-up list was read are
			// queued, so step-up cost follows the releasable volumes,
			// not all of them.
			if !wantsPass(v) || (first && !w.releasable(v)) {
				continue
			}
			changed = append(changed, changedVolume{structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}, v.ModifyIndex})
		}
		w.mu.Lock()
		for _, c := range changed {
			if st, seen := w.vols[c.ref]; first && seen && st.covers(c.index) {
				continue
			}
			w.enqueueLocked(c.ref)
		}
		w.mu.Unlock()
		w.feedIndex.Store(index)
		// Drop the batch before blocking again: the first one is the whole
		// table, which must not stay reachable while the watcher idles.
		vols, changed = nil, nil
		first = false
	}
}

// wantsPass: a volume with claims may have work; one without claims needs a
// pass only to clear a stale stuck mark.
func wantsPass(v *structs.Volume) bool {
	return len(v.Claims) > 0 || v.Stuck != nil
}

// releasable reports whether some claim of v is mid-release or its
// allocation is terminal or gone.
func (w *Watcher) releasable(v *structs.Volume) bool {
	if v.Stuck != nil {
		return true
	}
	for _, c := range v.Claims {
		if c.State != structs.ClaimTaken {
			return true
		}
		a, err := w.deps.State.Alloc(c.AllocID)
		if err != nil || a == nil || a.ClientStatus.Terminal() {
			return true
		}
	}
	return false
}

// retry runs f until it succeeds or ctx ends, backing off on the clock.
func (w *Watcher) retry(ctx context.Context, what string, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := w.backoff(attempt)
		w.logger.Warn("retrying", "op", what, "error", err, "in", d)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.clock.After(d):
		}
	}
}

// enqueueLocked queues a pass over ref, de-duplicated: a queued volume stays
// queued once, a running one is marked dirty and runs again when it ends.
// A worker goroutine is started only when the pool is below MaxConcurrency;
// workers exit when the queue is empty, so idle volumes hold none.
func (w *Watcher) enqueueLocked(ref structs.VolumeRef) {
	if !w.enabled {
		return
	}
	st := w.vols[ref]
	if st == nil {
		st = &volState{}
		if w.cfg.VolumeRateLimit > 0 {
			st.limiter = rate.NewLimiter(w.cfg.VolumeRateLimit, w.cfg.VolumeRateBurst)
		}
		w.vols[ref] = st
	}
	st.stopTimerLocked()
	switch {
	case st.running:
		st.dirty = true
		return
	case st.queued:
		return
	}
	st.queued = true
	w.pending.push(ref)
	if w.workers < w.cfg.MaxConcurrency {
		w.workers++
		w.wg.Add(1)
		go w.worker(w.ctx)
	}
}

// worker runs queued passes until the queue is empty.
func (w *Watcher) worker(ctx context.Context) {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		ref, st, ok := w.nextLocked()
		if !ok {
			w.workers--
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()

		wake, err := w.runPass(ctx, ref, st)
		w.finish(ref, st, wake, err)
	}
}

// nextLocked pops the next queued volume and marks it running.
func (w *Watcher) nextLocked() (structs.VolumeRef, *volState, bool) {
	for w.enabled {
		ref, ok := w.pending.pop()
		if !ok {
			break
		}
		st := w.vols[ref]
		if st == nil || !st.queued {
			continue
		}
		st.queued = false
		st.running = true
		st.done = make(chan struct{})
		return ref, st, true
	}
	return structs.VolumeRef{}, nil, false
}

// runPass applies the optional per-volume rate limit, then assesses.
func (w *Watcher) runPass(ctx context.Context, ref structs.VolumeRef, st *volState) (time.Time, error) {
	if st.limiter != nil {
		now := w.clock.Now()
		r := st.limiter.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			// Do not park the goroutine: give the token back and come
			// back when one is due.
			r.CancelAt(now)
			return now.Add(d), nil
		}
	}
	wake, err := w.assess(ctx, ref)
	if err == nil {
		w.metrics.VolumeAssessed(ref)
	}
	return wake, err
}

// finish ends a volume's run: run again if it changed meanwhile, else arm
// its wake-up (a claim waiting for NextAttempt) or its idle drop.
func (w *Watcher) finish(ref structs.VolumeRef, st *volState, wake time.Time, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st.running = false
	close(st.done)
	if !w.enabled || w.vols[ref] != st {
		return
	}
	if err != nil {
		// The store or log failed us (not a claim's own failure, which is
		// on the claim): look again after a volume-level backoff.
		st.fails++
		if ctxErr := w.ctx.Err(); ctxErr == nil {
			w.logger.Warn("volume pass failed", "namespace", ref.Namespace, "volume", ref.ID, "error", err)
		}
		wake = w.clock.Now().Add(w.backoff(st.fails))
	} else {
		st.fails = 0
	}
	if st.dirty {
		st.dirty = false
		w.enqueueLocked(ref)
		return
	}
	w.armLocked(ref, st, wake)
}

// armLocked sets the volume's single timer: a wake-up at wake, or (zero
// wake) the drop of its bookkeeping after IdleTimeout.
func (w *Watcher) armLocked(ref structs.VolumeRef, st *volState, wake time.Time) {
	st.stopTimerLocked()
	seq := st.seq
	if wake.IsZero() {
		st.timer = w.clock.AfterFunc(w.cfg.IdleTimeout, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.vols[ref] == st && st.seq == seq && !st.queued && !st.running {
				delete(w.vols, ref)
			}
		})
		return
	}
	st.timer = w.clock.AfterFunc(w.clock.Until(wake), func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.vols[ref] == st && st.seq == seq {
			w.enqueueLocked(ref)
		}
	})
}

// stopTimerLocked cancels the pending wake-up or idle drop, if any.
func (st *volState) stopTimerLocked() {
	st.seq++
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
}

// acquire takes a volume for an operator action, waiting for a running
// pass to end, so a detach never races the watcher's own pass.
func (w *Watcher) acquire(ctx context.Context, ref structs.VolumeRef) (*volState, error) {
	for {
		w.mu.Lock()
		if !w.enabled {
			w.mu.Unlock()
			return nil, structs.ErrNoLeader
		}
		st := w.vols[ref]
		if st == nil {
			st = &volState{}
			w.vols[ref] = st
		}
		if !st.running {
			st.stopTimerLocked()
			st.running = true
			st.done = make(chan struct{})
			// A queued pass would redo what we are about to do; run it
			// after us instead (it re-reads the checkpointed claims).
			if st.queued {
				st.queued = false
				st.dirty = true
			}
			w.mu.Unlock()
			return st, nil
		}
		done := st.done
		w.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Assess runs one pass over a volume now, as the loop would, and returns
// once it is done; it waits for a running pass first, as Detach does. It is
// for callers that must know a pass has happened: the model test of the
// claim machinery drives every pass through it.
func (w *Watcher) Assess(ctx context.Context, ref structs.VolumeRef) error {
	ctx, cancel, err := w.leaderContext(ctx)
	if err != nil {
		return fmt.Errorf("assess: %w", err)
	}
	defer cancel()
	st, err := w.acquire(ctx, ref)
	if err != nil {
		return fmt.Errorf("assess: %w", err)
	}
	wake, err := w.assess(ctx, ref)
	w.finish(ref, st, wake, err)
	return err
}

// leaderContext returns ctx additionally cancelled on step-down, for an
// operator action (detach, GC). The action joins the enable's wait group
// until the returned cancel is called, so a step-down waits for it as for
// the watcher's own passes (a detach could still send CSI calls after the
// step-down returned).
func (w *Watcher) leaderContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	w.mu.Lock()
	lctx, enabled := w.ctx, w.enabled
	if enabled {
		w.wg.Add(1)
	}
	w.mu.Unlock()
	if !enabled {
		return nil, nil, structs.ErrNoLeader
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(lctx, cancel)
	return ctx, func() { stop(); cancel(); w.wg.Done() }, nil
}

// clampRetry turns a module's retry_after_ms into a duration within [0,
// MaxRetryAfter]. A huge value must not overflow into a time in the past,
// which re-assessed the claim at once, forever.
func (w *Watcher) clampRetry(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	if ms >= w.cfg.MaxRetryAfter.Milliseconds() {
		return w.cfg.MaxRetryAfter
	}
	return time.Duration(ms) * time.Millisecond
}

// refQueue is a FIFO of volume refs.
type refQueue struct {
	items []structs.VolumeRef
	head  int
}

func (q *refQueue) push(r structs.VolumeRef) { q.items = append(q.items, r) }

func (q *refQueue) pop() (structs.VolumeRef, bool) {
	if q.head >= len(q.items) {
		q.items, q.head = q.items[:0], 0
		return structs.VolumeRef{}, false
	}
	r := q.items[q.head]
	q.items[q.head] = structs.VolumeRef{}
	q.head++
	if q.head > 1024 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		q.items, q.head = q.items[:n], 0
	}
	return r, true
}

func (q *refQueue) len() int { return len(q.items) - q.head }
