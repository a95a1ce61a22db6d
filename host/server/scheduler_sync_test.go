package server

import (
	"errors"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// TestSchedulerSyncNeedsTerm: a scheduler source is leader work. The FSM
// takes term 0 as unfenced, so a sync without the term its source runs
// under would be committed however late, after this server was deposed:
// the server refuses it and commits nothing.
func TestSchedulerSyncNeedsTerm(t *testing.T) {
	h := newHarness(t, "n1")
	req := &structs.SchedulerSyncRequest{Source: "nomad", Index: 5, Time: h.clock.Now()}
	if _, err := h.srv.SchedulerSync(h.ctx, req); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("a sync without a term: %v, want ErrNoLeader", err)
	}
	if cur, _ := h.store.Snapshot().SchedulerCursor(nil, "nomad"); cur != nil {
		t.Fatalf("a sync without a term committed cursor %+v", cur)
	}
	req.Term = h.cluster.ReadyTerm()
	if _, err := h.srv.SchedulerSync(h.ctx, req); err != nil {
		t.Fatal(err)
	}
	if cur, _ := h.store.Snapshot().SchedulerCursor(nil, "nomad"); cur == nil || cur.Index != 5 {
		t.Fatalf("cursor %+v after the sync under the current term", cur)
	}
}
