package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// Group commit of claim checkpoints (BenchmarkCheckpointGroupCommit). The watcher's release
// workers each write a checkpoint per claim transition; one raft entry per
// checkpoint made a release cost a log append, an fsync and an FSM
// transaction per transition. The batcher commits whatever checkpoints
// queued up while the previous entry was in flight as one
// ClaimCheckpointBatchType entry: no timer, so an idle cluster commits a
// lone checkpoint at once, as its own ClaimCheckpointType entry, and a busy
// one amortises the append over up to structs.MaxCheckpointBatch
// checkpoints.
//
// Every safety property of a single entry holds per checkpoint: the leader
// validates each against committed state before the append (a refusal
// there answers that checkpoint alone), the FSM fences each by its own
// term, the store validates each again, in order, inside the entry's one
// transaction and applies only those that pass (state/batch.go), and each
// caller gets its own index and error. A caller whose context ends after
// its checkpoint was queued gets structs.ErrOutcomeUnknown, as Apply's
// callers do: the batch may still commit it.
// CommitObserver is told how many checkpoints each group commit carried
// and how long its entry took from the append to its answer (the log
// write, replication to a quorum and the FSM's apply): with the watcher
// working on a bounded number of volumes at once, a release's rate
// follows that latency (host/metrics exports both).
type CommitObserver interface {
	CheckpointsCommitted(checkpoints int, took time.Duration)
}

type checkpointBatcher struct {
	c    *Cluster
	kick chan struct{} // cap 1: the queue is not empty

	mu    sync.Mutex
	queue []*pendingCheckpoint
}

type pendingCheckpoint struct {
	ctx  context.Context
	req  *structs.ClaimCheckpointRequest
	done chan checkpointResult // cap 1: the batcher never blocks on it
}

type checkpointResult struct {
	index uint64
	err   error
}

func newCheckpointBatcher(c *Cluster) *checkpointBatcher {
	return &checkpointBatcher{c: c, kick: make(chan struct{}, 1)}
}

// submit queues req and waits for its own outcome.
func (b *checkpointBatcher) submit(ctx context.Context, req *structs.ClaimCheckpointRequest) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if !b.c.IsLeader() {
		return 0, raftErr("apply", raft.ErrNotLeader)
	}
	p := &pendingCheckpoint{ctx: ctx, req: req, done: make(chan checkpointResult, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
	select {
	case r := <-p.done:
		return r.index, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("apply: %w (%w)", structs.ErrOutcomeUnknown, ctx.Err())
	case <-b.c.stopCh:
		return 0, fmt.Errorf("apply: %w (%w)", structs.ErrOutcomeUnknown, raft.ErrRaftShutdown)
	}
}

// run commits batches until stop closes. Owned by the Cluster (its wg).
func (b *checkpointBatcher) run(stop <-chan struct{}) {
	defer b.c.wg.Done()
	for {
		select {
		case <-stop:
			return
		case <-b.kick:
		}
		for {
			batch := b.take()
			if len(batch) == 0 {
				break
			}
			b.commit(batch)
		}
	}
}

// take removes up to MaxCheckpointBatch checkpoints from the queue.
func (b *checkpointBatcher) take() []*pendingCheckpoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.queue), structs.MaxCheckpointBatch)
	batch := b.queue[:n:n]
	b.queue = b.queue[n:]
	if len(b.queue) == 0 {
		b.queue = nil // let the old backing array go
	}
	return batch
}

// commit validates each checkpoint, appends the ones that pass as one
// entry and answers every caller.
func (b *checkpointBatcher) commit(batch []*pendingCheckpoint) {
	if !b.c.IsLeader() {
		for _, p := range batch {
			p.done <- checkpointResult{err: raftErr("apply", raft.ErrNotLeader)}
		}
		return
	}
	snap := b.c.store.Snapshot()
	live := batch[:0:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done <- checkpointResult{err: err} // never appended
			continue
		}
		if err := snap.Validate(structs.ClaimCheckpointType, p.req); err != nil {
			p.done <- checkpointResult{err: err}
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	if len(live) > 1 && !b.c.FeatureEnabled(FeatureCheckpointBatch) {
		// The older form (gate.go): one entry per checkpoint, while some
		// server does not understand the batch entry.
		for _, p := range live {
			b.commit([]*pendingCheckpoint{p})
		}
		return
	}
	gated := live[:0:0]
	for _, p := range live {
		// The writer wrote the older forms already (older.go): a field
		// still gated here is refused, never committed.
		if err := b.c.checkGate(structs.ClaimCheckpointType, p.req); err != nil {
			p.done <- checkpointResult{err: err}
			continue
		}
		gated = append(gated, p)
	}
	if live = gated; len(live) == 0 {
		return
	}
	t, req := structs.ClaimCheckpointType, any(live[0].req)
	if len(live) > 1 {
		all := make([]*structs.ClaimCheckpointRequest, len(live))
		for i, p := range live {
			all[i] = p.req
		}
		t, req = structs.ClaimCheckpointBatchType, &structs.ClaimCheckpointBatchRequest{Checkpoints: all}
	}
	data, err := encodeCommand(t, b.c.cfg.Clock.Now(), req)
	if err != nil {
		answerAll(live, checkpointResult{err: err})
		return
	}
	applied := time.Now()
	f := b.c.raft.Apply(data, b.c.cfg.ApplyTimeout)
	// Not f.Error(): raft answers no future still queued when it shuts
	// down, and Shutdown waits for this goroutine (TestClusterFailoverMidRelease
	// hung for 10 minutes killing a leader with an entry in flight).
	stopped, err := b.c.waitOrStop(f)
	if stopped {
		answerAll(live, checkpointResult{err: fmt.Errorf("apply: %w (%w)", structs.ErrOutcomeUnknown, raft.ErrRaftShutdown)})
		return
	}
	if err != nil {
		answerAll(live, checkpointResult{err: applyErr(context.Background(), err)})
		return
	}
	if o := b.c.cfg.Commits; o != nil {
		o.CheckpointsCommitted(len(live), time.Since(applied))
	}
	res, ok := f.Response().(fsmResult)
	if !ok {
		answerAll(live, checkpointResult{index: f.Index(), err: fmt.Errorf("apply: unexpected FSM response %T", f.Response())})
		return
	}
	if t == structs.ClaimCheckpointType {
		live[0].done <- checkpointResult{index: f.Index(), err: res.err}
		return
	}
	errs, ok := res.resp.([]error)
	if res.err != nil || !ok || len(errs) != len(live) {
		err := res.err
		if err == nil {
			err = fmt.Errorf("apply: unexpected batch response %T", res.resp)
		}
		answerAll(live, checkpointResult{index: f.Index(), err: err})
		return
	}
	for i, p := range live {
		p.done <- checkpointResult{index: f.Index(), err: errs[i]}
	}
}

func answerAll(batch []*pendingCheckpoint, r checkpointResult) {
	for _, p := range batch {
		p.done <- r
	}
}
