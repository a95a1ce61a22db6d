package cluster

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// fsm applies committed log entries to the state store.
type fsm struct {
	store  *state.Store
	meta   *meta
	logger hclog.Logger
	// halt is called once when the log holds an entry this binary does
	// not understand (halt.go); nil panics.
	halt func(error)

	// mu orders Apply with digest (digest.go): a digest reads the store,
	// the meta and the index of the last applied entry together.
	mu      sync.Mutex
	applied uint64
	halted  error // set by stop; every later Apply refuses

	// position is the index of the last entry the FSM was handed, a
	// command or a configuration (0 after a restore until the next one:
	// raft knows the snapshot's index). Raft's AppliedIndex runs ahead of
	// it by the batches queued for this goroutine; raft's snapshot
	// refusal compares the FSM's own (configPending).
	position atomic.Uint64
}

// fsmResult is what fsm.Apply returns through raft's ApplyFuture.Response.
// The error keeps its type (structs.ErrConflict, ...): the future hands the
// value over in-process.
type fsmResult struct {
	resp any
	err  error
}

// Apply implements raft.FSM. The store validates the request again inside
// its write transaction, so a request that raced another write since the
// leader validated it is refused here, atomically, and the refusal is the
// apply response: never a panic, never partial state.
func (f *fsm) Apply(l *raft.Log) any {
	f.position.Store(l.Index)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.halted != nil {
		return fsmResult{err: f.halted}
	}
	if err := f.understands(l); err != nil {
		return fsmResult{err: f.stop(err)}
	}
	f.applied = l.Index
	if len(l.Data) > 0 && isMetaType(l.Data[0]) {
		// A cluster-owned command (cluster ID, members): not the store's.
		err := f.meta.apply(l.Data[0], l.Data[1:])
		if err != nil {
			f.logger.Error("cluster log entry refused", "index", l.Index, "error", err)
		}
		return fsmResult{err: err}
	}
	t, at, req, err := decodeCommand(l.Data)
	if err != nil {
		f.logger.Error("undecodable log entry skipped", "index", l.Index, "error", err)
		return fsmResult{err: err}
	}
	if batch, ok := req.(*structs.ClaimCheckpointBatchRequest); ok {
		return f.applyCheckpointBatch(l, at, batch)
	}
	if err := fenceTerm(req, l.Term); err != nil {
		f.logger.Warn("log entry of an older leadership term refused", "index", l.Index, "type", t, "error", err)
		return fsmResult{err: err}
	}
	resp, err := f.store.ApplyAt(l.Index, at, t, req)
	if err != nil {
		// Debug, not error: the caller gets the typed error; logging it on
		// every server is the noise of hashicorp/nomad#27324.
		f.logger.Debug("log entry refused at apply", "index", l.Index, "type", t, "error", err)
	}
	return fsmResult{resp: resp, err: err}
}

// applyCheckpointBatch applies a group commit (batch.go): the term fence
// is checked for every checkpoint on its own, the admitted ones go to the
// store in one transaction, and the response is one error per checkpoint
// (nil: applied), in the batch's order. A fenced-out checkpoint fails
// alone.
func (f *fsm) applyCheckpointBatch(l *raft.Log, at time.Time, batch *structs.ClaimCheckpointBatchRequest) any {
	errs := make([]error, len(batch.Checkpoints))
	admitted := &structs.ClaimCheckpointBatchRequest{Checkpoints: make([]*structs.ClaimCheckpointRequest, 0, len(batch.Checkpoints))}
	slot := make([]int, 0, len(batch.Checkpoints)) // admitted[i] is batch.Checkpoints[slot[i]]
	for i, ck := range batch.Checkpoints {
		if ck == nil {
			errs[i] = structs.Invalid("checkpoints", "item %d is nil", i)
			continue
		}
		if err := fenceTerm(ck, l.Term); err != nil {
			f.logger.Warn("checkpoint of an older leadership term refused", "index", l.Index, "item", i, "error", err)
			errs[i] = err
			continue
		}
		admitted.Checkpoints = append(admitted.Checkpoints, ck)
		slot = append(slot, i)
	}
	if len(admitted.Checkpoints) == 0 {
		return fsmResult{resp: errs}
	}
	resp, err := f.store.ApplyAt(l.Index, at, structs.ClaimCheckpointBatchType, admitted)
	if err != nil {
		// The whole transaction was refused (a store error): nothing of
		// the entry applied, every admitted checkpoint gets the error.
		f.logger.Debug("checkpoint batch refused at apply", "index", l.Index, "error", err)
		for _, i := range slot {
			errs[i] = err
		}
		return fsmResult{resp: errs}
	}
	sub, ok := resp.([]error)
	if !ok || len(sub) != len(slot) {
		err := fmt.Errorf("checkpoint batch: unexpected store response %T", resp)
		for _, i := range slot {
			errs[i] = err
		}
		return fsmResult{resp: errs}
	}
	for j, i := range slot {
		errs[i] = sub[j]
	}
	return fsmResult{resp: errs}
}

// fenced is a request written by leader work under a leadership term
// (structs.VolumeClaimRequest, structs.ClaimCheckpointRequest).
type fenced interface{ FencedTerm() uint64 }

// fenceTerm refuses a fenced request appended in another term than the one
// its writer worked under: a watcher pass or claim of a deposed leader,
// still running when this server was re-elected (or its entry re-sent by a
// new leader), must not move a claim (the failover fence). Term 0 is an
// unfenced writer (tests of the store alone).
func fenceTerm(req any, logTerm uint64) error {
	f, ok := req.(fenced)
	if !ok {
		return nil
	}
	if t := f.FencedTerm(); t != 0 && t != logTerm {
		return fmt.Errorf("entry of term %d appended in term %d: %w", t, logTerm, structs.ErrStaleTerm)
	}
	return nil
}

// StoreConfiguration implements raft.ConfigurationStore, and stores
// nothing: the members are the cluster meta's, written by commands. Its
// presence makes raft count a configuration entry as applied by the FSM.
// Without it the FSM's index stopped at the last command before a
// configuration change, and raft refuses a snapshot below a committed
// configuration ("cannot take snapshot now, wait until the configuration
// entry ... has been applied"): a server stopped right after another
// joined, with no command since (the next server of a rolling restart),
// skipped its snapshot on stop and replayed its log when it came back.
// f.applied stays the last command's index (Digest's CommandIndex).
func (f *fsm) StoreConfiguration(index uint64, _ raft.Configuration) { f.position.Store(index) }

// Snapshot implements raft.FSM: it captures a memdb read view, which is
// immutable, so Persist runs concurrently with later applies.
// The cluster meta is copied now too: raft calls Snapshot on the FSM
// goroutine, so both are taken at the same log index.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.halted != nil {
		// A snapshot would claim the entry it could not apply.
		return nil, f.halted
	}
	return &fsmSnapshot{snap: f.store.Snapshot(), header: f.meta.header(), logger: f.logger}, nil
}

// Restore implements raft.FSM. The store is restored first and the meta
// only once that succeeded, so a bad stream changes neither.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	h, body, err := readHeader(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.store.Restore(body); err != nil {
		return err
	}
	f.meta.restore(h)
	f.applied = 0 // unknown until the next entry: raft knows the snapshot's index
	f.position.Store(0)
	return nil
}

type fsmSnapshot struct {
	snap   *state.Snapshot
	header snapshotHeader
	logger hclog.Logger
}

// Persist implements raft.FSMSnapshot.
//
// It logs how long the encoding and the sink's close (raft's file store
// flushes and fsyncs the whole file there, then renames it) each took:
// raft's own "snapshot complete" line gives only their sum, and at
// 1,000,000 volumes a snapshot written under load took several times its
// encoding's CPU (BENCHMARKS "A million volumes through raft").
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	w := &countingWriter{w: sink}
	if err := writeHeader(w, s.header); err != nil {
		_ = sink.Cancel()
		return err
	}
	if err := s.snap.Persist(w); err != nil {
		_ = sink.Cancel()
		return err
	}
	encoded := time.Now()
	if err := sink.Close(); err != nil {
		return err
	}
	s.logger.Info("snapshot written", "id", sink.ID(), "bytes", w.n,
		"encode", encoded.Sub(start), "close", time.Since(encoded))
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}
