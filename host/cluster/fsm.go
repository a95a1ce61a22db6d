package cluster

import (
	"fmt"
	"io"

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
	if err := fenceTerm(req, l.Term); err != nil {
		f.logger.Warn("log entry of an older leadership term refused", "index", l.Index, "type", t, "error", err)
		return fsmResult{err: err}
	}
	resp, err := f.store.ApplyAt(l.Index, at, t, req)
	if err != nil {
		// Debug, not error: the caller gets the typed error; logging it on
		// every server is the noise ANCHORS pain 10 complains about.
		f.logger.Debug("log entry refused at apply", "index", l.Index, "type", t, "error", err)
	}
	return fsmResult{resp: resp, err: err}
}

// fenced is a request written by leader work under a leadership term
// (structs.VolumeClaimRequest, structs.ClaimCheckpointRequest).
type fenced interface{ FencedTerm() uint64 }

// fenceTerm refuses a fenced request appended in another term than the one
// its writer worked under: a watcher pass or claim of a deposed leader,
// still running when this server was re-elected (or its entry re-sent by a
// new leader), must not move a claim (issue 10 defect 5). Term 0 is an
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

// Snapshot implements raft.FSM: it captures a memdb read view, which is
// immutable, so Persist runs concurrently with later applies.
// The cluster meta is copied now too: raft calls Snapshot on the FSM
// goroutine, so both are taken at the same log index.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{snap: f.store.Snapshot(), header: f.meta.header()}, nil
}

// Restore implements raft.FSM. The store is restored first and the meta
// only once that succeeded, so a bad stream changes neither.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	h, body, err := readHeader(rc)
	if err != nil {
		return err
	}
	if err := f.store.Restore(body); err != nil {
		return err
	}
	f.meta.restore(h)
	return nil
}

type fsmSnapshot struct {
	snap   *state.Snapshot
	header snapshotHeader
}

// Persist implements raft.FSMSnapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeHeader(sink, s.header); err != nil {
		_ = sink.Cancel()
		return err
	}
	if err := s.snap.Persist(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}
