package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// batchFixture: base data, claims vol-sw/a1, vol-mw/a2 and vol-snr/a4
// (read) whose allocs completed, vol-ms/a5 whose alloc still runs.
func batchFixture(t *testing.T) (*Cluster, *state.Store, uint64) {
	c, s := start(t, Config{Dev: true})
	loadBase(t, c)
	term := c.ReadyTerm()
	reader := claimReq("vol-snr", "a4", "n1")
	reader.Claim.Mode = structs.ClaimRead
	for _, cl := range []*structs.VolumeClaimRequest{claimReq("vol-sw", "a1", "n1"), claimReq("vol-mw", "a2", "n2"), claimReq("vol-ms", "a5", "n1"), reader} {
		cl.Term = term
		mustApply(t, c, structs.VolumeClaimType, cl)
	}
	mustApply(t, c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", JobID: "web", ClientStatus: structs.AllocComplete},
		{ID: "a2", Namespace: "default", NodeID: "n2", JobID: "web", ClientStatus: structs.AllocComplete},
		{ID: "a4", Namespace: "default", NodeID: "n1", JobID: "web", ClientStatus: structs.AllocComplete},
	}})
	return c, s, term
}

func checkpointReq(s *state.Store, vol, alloc string, to structs.ClaimState, term uint64) *structs.ClaimCheckpointRequest {
	v, _ := s.Snapshot().VolumeByID(nil, "default", vol)
	c := v.Claims[alloc].Copy()
	c.State = to
	return &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: vol, Claim: c, Term: term}
}

func claimState(s *state.Store, vol, alloc string) structs.ClaimState {
	v, _ := s.Snapshot().VolumeByID(nil, "default", vol)
	if c := v.Claims[alloc]; c != nil {
		return c.State
	}
	return "gone"
}

// A batch entry keeps every safety check per checkpoint: the FSM fences
// each by its own term, the store refuses one whose alloc still runs, and
// neither refusal fails the checkpoint beside it.
func TestCheckpointBatchEntryFencesAndRefusesEach(t *testing.T) {
	c, s, term := batchFixture(t)
	batch := &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{
		checkpointReq(s, "vol-sw", "a1", structs.ClaimNodeDetached, term),
		checkpointReq(s, "vol-mw", "a2", structs.ClaimNodeDetached, term+7), // another term's
		checkpointReq(s, "vol-ms", "a5", structs.ClaimNodeDetached, term),   // alloc a5 runs
	}}
	_, resp, err := c.Apply(testCtx(t), structs.ClaimCheckpointBatchType, batch)
	if err != nil {
		t.Fatalf("batch entry refused as a whole: %v", err)
	}
	errs, ok := resp.([]error)
	if !ok || len(errs) != 3 {
		t.Fatalf("response %T %v", resp, resp)
	}
	if errs[0] != nil || !errors.Is(errs[1], structs.ErrStaleTerm) || !errors.Is(errs[2], structs.ErrConflict) || errors.Is(errs[2], structs.ErrStaleTerm) {
		t.Fatalf("per-checkpoint answers %v, want [nil, stale term, conflict]", errs)
	}
	if got := []structs.ClaimState{claimState(s, "vol-sw", "a1"), claimState(s, "vol-mw", "a2"), claimState(s, "vol-ms", "a5")}; fmt.Sprint(got) !=
		fmt.Sprint([]structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimTaken, structs.ClaimTaken}) {
		t.Fatalf("claim states %v: only the admitted checkpoint may move", got)
	}
}

// The batcher answers each caller on its own: a checkpoint refused by the
// leader's check never reaches the log, the others share one entry, and a
// fenced-out one in that entry fails alone.
func TestCheckpointBatcherAnswersEachCaller(t *testing.T) {
	c, s, term := batchFixture(t)
	pending := func(req *structs.ClaimCheckpointRequest) *pendingCheckpoint {
		return &pendingCheckpoint{ctx: testCtx(t), req: req, done: make(chan checkpointResult, 1)}
	}
	unknown := checkpointReq(s, "vol-sw", "a1", structs.ClaimNodeDetached, term)
	unknown.Claim.AllocID = "nobody"
	batch := []*pendingCheckpoint{
		pending(checkpointReq(s, "vol-sw", "a1", structs.ClaimNodeDetached, term)),
		pending(unknown),
		pending(checkpointReq(s, "vol-mw", "a2", structs.ClaimNodeDetached, term)),
		pending(checkpointReq(s, "vol-ms", "a5", structs.ClaimNodeDetached, term)),    // alloc runs
		pending(checkpointReq(s, "vol-snr", "a4", structs.ClaimNodeDetached, term+1)), // another term's
	}
	before := c.LastIndex()
	commits := &commitRecorder{}
	c.cfg.Commits = commits
	c.checkpoints.commit(batch)
	res := make([]checkpointResult, len(batch))
	for i, p := range batch {
		res[i] = <-p.done
	}
	if res[0].err != nil || res[2].err != nil {
		t.Fatalf("valid checkpoints refused: %v, %v", res[0].err, res[2].err)
	}
	if !errors.Is(res[1].err, structs.ErrNotFound) || res[1].index != 0 {
		t.Fatalf("unknown claim: %+v, want ErrNotFound before the log", res[1])
	}
	if !errors.Is(res[3].err, structs.ErrConflict) || res[3].index != 0 {
		t.Fatalf("running alloc: %+v, want a conflict before the log", res[3])
	}
	// The stale term is only known to the FSM: it is in the entry and
	// refused there, alone.
	if !errors.Is(res[4].err, structs.ErrStaleTerm) || res[4].index != before+1 {
		t.Fatalf("another term's checkpoint: %+v, want ErrStaleTerm from the entry", res[4])
	}
	if res[0].index != res[2].index || res[0].index != before+1 || c.LastIndex() != before+1 {
		t.Fatalf("indexes %d and %d, log %d -> %d: want the two in one new entry", res[0].index, res[2].index, before, c.LastIndex())
	}
	if claimState(s, "vol-sw", "a1") != structs.ClaimNodeDetached || claimState(s, "vol-mw", "a2") != structs.ClaimNodeDetached ||
		claimState(s, "vol-ms", "a5") != structs.ClaimTaken || claimState(s, "vol-snr", "a4") != structs.ClaimTaken {
		t.Fatal("state does not match the answers")
	}
	// One entry, carrying the three the leader let through.
	if len(commits.got) != 1 || commits.got[0] != 3 || commits.took[0] <= 0 {
		t.Fatalf("group commits observed: %v taking %v, want one of 3 checkpoints", commits.got, commits.took)
	}
}

// commitRecorder is a CommitObserver keeping what it is told.
type commitRecorder struct {
	got  []int
	took []time.Duration
}

func (r *commitRecorder) CheckpointsCommitted(n int, took time.Duration) {
	r.got, r.took = append(r.got, n), append(r.took, took)
}

// A caller whose context ends while its checkpoint waits gets
// ErrOutcomeUnknown, never a plain failure; the batcher then drops the
// checkpoint without appending it, which "unknown" allows.
func TestCheckpointBatcherUnknownOutcome(t *testing.T) {
	c, s, term := batchFixture(t)
	idle := newCheckpointBatcher(c) // not running: the checkpoint stays queued
	ctx, cancel := context.WithCancel(testCtx(t))
	errc := make(chan error, 1)
	go func() {
		_, err := idle.submit(ctx, checkpointReq(s, "vol-sw", "a1", structs.ClaimNodeDetached, term))
		errc <- err
	}()
	testutil.WaitFor(t, "the checkpoint to be queued", func() bool {
		idle.mu.Lock()
		defer idle.mu.Unlock()
		return len(idle.queue) == 1
	})
	cancel()
	if err := <-errc; !errors.Is(err, structs.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while queued: %v, want ErrOutcomeUnknown", err)
	}
	before := c.LastIndex()
	idle.commit(idle.take())
	if c.LastIndex() != before || claimState(s, "vol-sw", "a1") != structs.ClaimTaken {
		t.Fatal("a checkpoint whose caller gave up was appended")
	}
}

// Concurrent checkpoints through the watcher's writer all land, each with
// its own answer (run with -race).
func TestCheckpointsConcurrent(t *testing.T) {
	c, s := start(t, Config{Dev: true})
	loadBase(t, c)
	term := c.ReadyTerm()
	const n = 48
	var allocs []*structs.Alloc
	for i := range n {
		allocs = append(allocs, &structs.Alloc{ID: fmt.Sprintf("b%d", i), Namespace: "default", NodeID: "n1", JobID: "j", ClientStatus: structs.AllocRunning})
	}
	mustApply(t, c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
	for i := range n {
		cl := claimReq("vol-mw", fmt.Sprintf("b%d", i), "n1")
		cl.Term = term
		mustApply(t, c, structs.VolumeClaimType, cl)
	}
	for _, a := range allocs {
		a.ClientStatus = structs.AllocComplete
	}
	mustApply(t, c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
	w := c.ClaimWriter()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = w.CheckpointClaim(testCtx(t), checkpointReq(s, "vol-mw", fmt.Sprintf("b%d", i), structs.ClaimNodeDetached, term))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		if st := claimState(s, "vol-mw", fmt.Sprintf("b%d", i)); st != structs.ClaimNodeDetached {
			t.Fatalf("claim b%d is %s", i, st)
		}
	}
}
