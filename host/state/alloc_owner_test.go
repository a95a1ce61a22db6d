package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// TestAllocOwnerAndNamespaceHeldAtApply: two writes of one new allocation
// ID both pass the check before the log (each judged against a state
// that does not have it yet, as when an API write and a Nomad sync race);
// the one applied second is refused with the same error the check before
// the log gives, and changes nothing. Before the rules ran at apply, an
// API write applied after the sync took the Nomad allocation over (and
// could end it, so the watcher released its claims under a running job).
func TestAllocOwnerAndNamespaceHeldAtApply(t *testing.T) {
	api := func(a *structs.Alloc) *structs.AllocUpsertRequest {
		return &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{a}, KeepNamespace: true}
	}
	type entry struct {
		t   structs.MessageType
		req any
	}
	for _, tc := range []struct {
		name          string
		first, second entry
		wantErr       string
		kind          error
	}{
		{"a sync then an API write ending it",
			entry{structs.SchedulerSyncType, schedSync(10, nomadAlloc("race-1", "n1", structs.AllocRunning))},
			entry{structs.AllocUpsertType, api(&structs.Alloc{ID: "race-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete})},
			`registered by scheduler "nomad"`, structs.ErrConflict},
		{"an API write then a sync",
			entry{structs.AllocUpsertType, api(&structs.Alloc{ID: "race-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning})},
			entry{structs.SchedulerSyncType, schedSync(10, nomadAlloc("race-1", "n1", structs.AllocRunning))},
			"registered by the API", structs.ErrConflict},
		{"two API writes in two namespaces",
			entry{structs.AllocUpsertType, api(&structs.Alloc{ID: "race-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning})},
			entry{structs.AllocUpsertType, api(&structs.Alloc{ID: "race-1", Namespace: "other", NodeID: "n1", ClientStatus: structs.AllocRunning})},
			"cannot move", nil},
		{"two syncs in two namespaces",
			entry{structs.SchedulerSyncType, schedSync(10, nomadAlloc("race-1", "n1", structs.AllocRunning))},
			entry{structs.SchedulerSyncType, schedSync(11, &structs.Alloc{ID: "race-1", Namespace: "other", NodeID: "n1", JobID: "job", ClientStatus: structs.AllocRunning, Source: "nomad"})},
			"cannot move", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			pre := f.s.Snapshot()
			for _, e := range []entry{tc.first, tc.second} {
				if err := pre.Validate(e.t, e.req); err != nil {
					t.Fatalf("before the log, on a state without the allocation: %v", err)
				}
			}
			f.must(tc.first.t, tc.first.req)
			before, was := f.digest(), f.alloc("race-1")
			_, err := f.apply(tc.second.t, tc.second.req)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("second entry at apply: %v, want a refusal naming %q", err, tc.wantErr)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want kind %v", err, tc.kind)
			}
			// The same refusal as before the log: one rule.
			if perr := f.s.Snapshot().Validate(tc.second.t, tc.second.req); perr == nil || perr.Error() != err.Error() {
				t.Fatalf("before the log now: %v; at apply: %v", perr, err)
			}
			if f.digest() != before {
				t.Fatal("a refused entry changed the state")
			}
			if now := f.alloc("race-1"); now.Source != was.Source || now.Namespace != was.Namespace || now.ClientStatus != was.ClientStatus {
				t.Fatalf("allocation %+v, was %+v", now, was)
			}
		})
	}
}

// An allocation write without the keep-namespace mark (what a leader
// writes while a server of the previous release could apply it, and what
// that release's own leader wrote) moves the allocation as that release
// did, so every replica applies the entry alike; with the mark the store
// refuses the move.
func TestAllocNamespaceMoveOnlyRefusedWithTheMark(t *testing.T) {
	s := NewStore()
	apply := func(idx uint64, t structs.MessageType, req any) error { _, err := s.Apply(idx, t, req); return err }
	if err := apply(1, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady}}); err != nil {
		t.Fatal(err)
	}
	write := func(idx uint64, ns string, mark bool) error {
		return apply(idx, structs.AllocUpsertType, &structs.AllocUpsertRequest{KeepNamespace: mark, Allocs: []*structs.Alloc{
			{ID: "a1", Namespace: ns, NodeID: "n1", JobID: "web", ClientStatus: structs.AllocRunning}}})
	}
	if err := write(2, "default", true); err != nil {
		t.Fatal(err)
	}
	if err := write(3, "other", true); err == nil || !strings.Contains(err.Error(), "cannot move") {
		t.Fatalf("a marked move: %v, want refused", err)
	}
	if err := write(4, "other", false); err != nil {
		t.Fatalf("an unmarked move (the previous release's entry): %v, want applied as it was", err)
	}
	if a, _ := s.Snapshot().AllocByID(nil, "a1"); a == nil || a.Namespace != "other" {
		t.Fatalf("a1 = %+v, want moved to other", a)
	}
}
