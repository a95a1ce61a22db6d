package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

func nomadAlloc(id, node string, st structs.AllocClientStatus) *structs.Alloc {
	return &structs.Alloc{ID: id, Namespace: "default", NodeID: node, JobID: "job", ClientStatus: st, Source: "nomad"}
}

func schedSync(idx uint64, allocs ...*structs.Alloc) *structs.SchedulerSyncRequest {
	return &structs.SchedulerSyncRequest{Source: "nomad", Index: idx, Allocs: allocs, Time: t0}
}

// addScheduler gives the persist round trip a scheduler cursor.
func addScheduler(f *fixture) {
	f.must(structs.SchedulerSyncType, schedSync(42, nomadAlloc("nomad-1", "n1", structs.AllocRunning)))
}

// TestSchedulerSync: the rules a scheduler source's batch obeys are the
// store's, so a bridge with a bug (or a deposed leader's stale view)
// cannot rewind the cursor, take over an operator's allocation, or bring
// a terminal allocation back to life; a refused batch writes nothing,
// not even its cursor.
func TestSchedulerSync(t *testing.T) {
	cases := []struct {
		name    string
		req     *structs.SchedulerSyncRequest
		wantErr string
		kind    error
	}{
		{name: "forward", req: schedSync(20, nomadAlloc("nomad-1", "n1", structs.AllocComplete))},
		{name: "same index again (idempotent re-apply)", req: schedSync(10, nomadAlloc("nomad-1", "n1", structs.AllocRunning))},
		{name: "cursor only", req: schedSync(11)},
		{name: "backwards", req: schedSync(9), wantErr: "would go backwards", kind: structs.ErrConflict},
		{name: "backwards with reset", req: &structs.SchedulerSyncRequest{Source: "nomad", Index: 3, Reset: true, Time: t0}},
		{name: "an operator's allocation", req: schedSync(12, &structs.Alloc{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete, Source: "nomad"}),
			wantErr: "registered by the API", kind: structs.ErrConflict},
		{name: "another source's allocation", req: schedSync(12, &structs.Alloc{ID: "nomad-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete, Source: "k8s"}),
			wantErr: "must be \"nomad\""},
		{name: "unknown node", req: schedSync(12, nomadAlloc("nomad-2", "nope", structs.AllocRunning)), wantErr: "nope", kind: structs.ErrNotFound},
		{name: "no time", req: &structs.SchedulerSyncRequest{Source: "nomad", Index: 12}, wantErr: "time"},
		{name: "bad source", req: &structs.SchedulerSyncRequest{Source: "", Index: 12, Time: t0}, wantErr: "source"},
		{name: "event without type", req: &structs.SchedulerSyncRequest{Source: "nomad", Index: 12, Time: t0, Events: []*structs.Event{{Message: "x"}}}, wantErr: "type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.must(structs.SchedulerSyncType, schedSync(10, nomadAlloc("nomad-1", "n1", structs.AllocRunning)))
			before := f.digest()
			_, err := f.apply(structs.SchedulerSyncType, tc.req)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				cur, _ := f.s.Snapshot().SchedulerCursor(nil, "nomad")
				if cur.Index != tc.req.Index {
					t.Fatalf("cursor %d, want %d", cur.Index, tc.req.Index)
				}
				for _, a := range tc.req.Allocs {
					if got := f.alloc(a.ID); got.ClientStatus != a.ClientStatus || got.Source != "nomad" {
						t.Fatalf("alloc %s = %+v", a.ID, got)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want kind %v", err, tc.kind)
			}
			if f.digest() != before {
				t.Fatal("a refused sync changed the state")
			}
		})
	}
}

// TestSchedulerSyncTerminalIsForGood: a late event of a live status (a
// Nomad replay, a stale list) cannot undo a terminal status the bridge
// committed: the claim may be released already.
func TestSchedulerSyncTerminalIsForGood(t *testing.T) {
	f := newFixture(t)
	f.must(structs.SchedulerSyncType, schedSync(10, nomadAlloc("nomad-1", "n1", structs.AllocComplete)))
	_, err := f.apply(structs.SchedulerSyncType, schedSync(11, nomadAlloc("nomad-1", "n1", structs.AllocRunning)))
	if !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("err = %v, want a conflict", err)
	}
}

// TestSchedulerSyncResetAndEvents: a reset may rewind the cursor (counted),
// and the batch's events are committed with it.
func TestSchedulerSyncResetAndEvents(t *testing.T) {
	f := newFixture(t)
	f.must(structs.SchedulerSyncType, schedSync(10))
	f.must(structs.SchedulerSyncType, &structs.SchedulerSyncRequest{Source: "nomad", Index: 2, Reset: true, Time: t0,
		Events: []*structs.Event{{Type: structs.EventScheduler, Message: "nomad index went back from 10 to 2"}}})
	cur, _ := f.s.Snapshot().SchedulerCursor(nil, "nomad")
	if cur.Index != 2 || cur.Resets != 1 {
		t.Fatalf("cursor %+v", cur)
	}
	evs := f.events()
	if last := evs[len(evs)-1]; last.Type != structs.EventScheduler || !strings.Contains(last.Message, "went back") {
		t.Fatalf("last event %+v", last)
	}
}

// TestAPIAllocWritesLeaveSchedulerAllocsAlone: the API's allocation
// writes (PUT /v1/allocs, node:write) and a scheduler source's sync each
// own their allocations. An API write that ends an allocation Nomad
// mirrors would have the watcher release its claims while Nomad still
// runs it; one that names a source would plant an allocation the bridge
// judges as its own; one that moves an allocation to another namespace
// would carry its claims' owner across namespaces. Each is refused by
// the leader's check before the log (Snapshot.Validate; committed
// entries replay as they applied), nothing changed.
func TestAPIAllocWritesLeaveSchedulerAllocsAlone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		alloc   *structs.Alloc
		wantErr string
		kind    error
	}{
		{"end an allocation Nomad mirrors", &structs.Alloc{ID: "nomad-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete},
			"scheduler \"nomad\"", structs.ErrConflict},
		// `volhost alloc update` reads the allocation and writes it back,
		// source included.
		{"end an allocation Nomad mirrors, its source copied", &structs.Alloc{ID: "nomad-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete, Source: "nomad"},
			"scheduler \"nomad\"", structs.ErrConflict},
		{"name a source", &structs.Alloc{ID: "new", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning, Source: "nomad"},
			"source", nil},
		{"move an allocation to another namespace", &structs.Alloc{ID: "a1", Namespace: "other", NodeID: "n1", ClientStatus: structs.AllocRunning},
			"namespace", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.must(structs.SchedulerSyncType, schedSync(10, nomadAlloc("nomad-1", "n1", structs.AllocRunning)))
			err := f.s.Snapshot().Validate(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{tc.alloc}, KeepNamespace: true})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want a refusal naming %q", err, tc.wantErr)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want kind %v", err, tc.kind)
			}
		})
	}
	// A sync moving its own allocation to another namespace: refused too.
	f := newFixture(t)
	f.must(structs.SchedulerSyncType, schedSync(10, nomadAlloc("nomad-1", "n1", structs.AllocRunning)))
	moved := nomadAlloc("nomad-1", "n1", structs.AllocRunning)
	moved.Namespace = "other"
	if err := f.s.Snapshot().Validate(structs.SchedulerSyncType, schedSync(11, moved)); err == nil || !strings.Contains(err.Error(), "cannot move") {
		t.Fatalf("a sync moving an allocation's namespace: %v", err)
	}
}
