package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// Two replicas fed the same log have the same digest at the same index;
// one fed a different entry differs, and so does one whose cluster meta
// differs (a member record) with an equal store.
func TestDigestSameLogSameDigest(t *testing.T) {
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	entry := func(typ structs.MessageType, req any) []byte {
		b, err := encodeCommand(typ, now, req)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	member, _ := encodeMeta(memberUpsertType, metaCommand{Member: &Member{ID: "s1", HTTPAddr: "h1", Version: 1, Build: "x", Features: Features()}})
	log := [][]byte{
		member,
		entry(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady}}),
		entry(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "csi", ControllerEndpoint: "unix:///csi.sock"}}),
	}
	replica := func(entries [][]byte) Digest {
		f := &fsm{store: state.NewStore(), meta: newMeta(), logger: hclog.NewNullLogger()}
		for i, e := range entries {
			if res := f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: e}).(fsmResult); res.err != nil {
				t.Fatalf("entry %d: %v", i+1, res.err)
			}
		}
		snap, m, idx := f.view()
		d, err := hashState(snap, m)
		if err != nil {
			t.Fatal(err)
		}
		return Digest{CommandIndex: idx, Digest: d}
	}
	a, b := replica(log), replica(log)
	if a != b || a.CommandIndex != 3 {
		t.Fatalf("same log: %+v and %+v", a, b)
	}
	divergent := append(append([][]byte(nil), log[:2]...),
		entry(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "csi", ControllerEndpoint: "unix:///other.sock"}}))
	if c := replica(divergent); c.CommandIndex != a.CommandIndex || c.Digest == a.Digest {
		t.Fatalf("divergent replica: %+v vs %+v", c, a)
	}
	otherMember, _ := encodeMeta(memberUpsertType, metaCommand{Member: &Member{ID: "s1", HTTPAddr: "h1", Version: 1}})
	if c := replica(append([][]byte{otherMember}, log[1:]...)); c.Digest == a.Digest {
		t.Fatal("a different member record gave the same digest")
	}
}

// Every server of a cluster reports the same digest at the leader's index.
func TestDigestEqualAcrossServers(t *testing.T) {
	tc := newCluster(t, 3)
	l := tc.leader()
	loadBase(t, l.c)
	if err := l.c.Barrier(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	at := l.c.AppliedIndex()
	want, err := l.c.Digest(testCtx(t), at)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.nodes {
		d, err := n.c.Digest(testCtx(t), at)
		if err != nil {
			t.Fatal(err)
		}
		if d.CommandIndex != want.CommandIndex || d.Digest != want.Digest {
			t.Fatalf("%s: %+v, leader %+v", n.id, d, want)
		}
	}
}
