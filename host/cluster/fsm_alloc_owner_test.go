package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// TestReplayRefusesAnAPIWriteToASchedulerAlloc: a log holding an API
// write that ends an allocation the Nomad bridge synced (committed by a
// version that checked ownership only before the log, or by a race of the
// two) replays with that entry refused: the allocation stays running and
// its claims are not released under the job.
func TestReplayRefusesAnAPIWriteToASchedulerAlloc(t *testing.T) {
	now := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	entry := func(typ structs.MessageType, req any) []byte {
		b, err := encodeCommand(typ, now, req)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	running := &structs.Alloc{ID: "nomad-1", Namespace: "default", NodeID: "n1", JobID: "job", ClientStatus: structs.AllocRunning, Source: "nomad"}
	log := [][]byte{
		entry(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady}}),
		entry(structs.SchedulerSyncType, &structs.SchedulerSyncRequest{Source: "nomad", Index: 10, Time: now, Allocs: []*structs.Alloc{running}}),
	}
	ended := entry(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "nomad-1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete}}})

	s := state.NewStore()
	f := &fsm{store: s, meta: newMeta(), logger: hclog.NewNullLogger()}
	for i, e := range log {
		if res := f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: e}).(fsmResult); res.err != nil {
			t.Fatalf("entry %d: %v", i+1, res.err)
		}
	}
	before, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	res := f.Apply(&raft.Log{Index: uint64(len(log) + 1), Term: 1, Type: raft.LogCommand, Data: ended}).(fsmResult)
	if !errors.Is(res.err, structs.ErrConflict) {
		t.Fatalf("the API write ending nomad-1 replayed: %+v", res)
	}
	if after, _ := s.Digest(); after != before {
		t.Fatal("the refused entry changed the state")
	}
	if a, _ := s.Snapshot().AllocByID(nil, "nomad-1"); a == nil || a.ClientStatus != structs.AllocRunning || a.Source != "nomad" {
		t.Fatalf("nomad-1 = %+v, want running and the bridge's", a)
	}
}
