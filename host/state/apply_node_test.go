package state

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

func fence(reason string) *structs.NodeFence {
	return &structs.NodeFence{Reason: reason, Source: "operator", Accessor: "acc-1", Time: t0}
}

func TestNodeFenceValidation(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fixture)
		req   *structs.NodeFenceRequest
		want  error // nil: a *structs.ValidationError naming field
		field string
	}{
		{name: "unknown node", req: &structs.NodeFenceRequest{NodeID: "nope", Fence: fence("off")}, want: structs.ErrNotFound},
		{name: "no reason", req: &structs.NodeFenceRequest{NodeID: "n1", Fence: fence("")}, field: "fence.reason"},
		{name: "reason too long", req: &structs.NodeFenceRequest{NodeID: "n1", Fence: fence(strings.Repeat("x", MaxFenceReasonLength+1))}, field: "fence.reason"},
		{name: "no source", req: &structs.NodeFenceRequest{NodeID: "n1", Fence: &structs.NodeFence{Reason: "off", Time: t0}}, field: "fence.source"},
		{name: "unfence an unfenced node", req: &structs.NodeFenceRequest{NodeID: "n1"}, want: structs.ErrConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			before := f.digest()
			_, err := f.apply(structs.NodeFenceType, tc.req)
			var ve *structs.ValidationError
			switch {
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("err = %v, want %v", err, tc.want)
			case tc.want == nil && (!errors.As(err, &ve) || ve.Field != tc.field):
				t.Fatalf("err = %v, want a validation error of %s", err, tc.field)
			}
			if f.digest() != before {
				t.Fatal("a refused fence changed the state")
			}
		})
	}
}

// A fence is recorded with its reason and an event, survives the node
// re-registering, refuses new claims, wakes the node's volumes, and
// unfence lifts it.
func TestNodeFenceLifecycle(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-mw", "a1", structs.ClaimWrite)
	volIdx := f.volume("default", "vol-mw").ModifyIndex

	f.must(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: "n1", Fence: fence("powered off in console")})
	n := f.node("n1")
	if n.Fence == nil || n.Fence.Reason != "powered off in console" {
		t.Fatalf("fence = %+v", n.Fence)
	}
	if got := n.DisplayStatus(); got != "fenced, heartbeating" {
		t.Fatalf("display status = %q", got)
	}
	if v := f.volume("default", "vol-mw"); v.ModifyIndex == volIdx {
		t.Fatal("fencing did not wake the volumes claimed on the node")
	}
	evs := f.events()
	last := evs[len(evs)-1]
	if last.Type != structs.EventNodeFence || last.Fields["reason"] != "powered off in console" || last.Fields["accessor"] != "acc-1" {
		t.Fatalf("last event = %+v", last)
	}

	// Re-registering (the agent restarting) keeps the fence.
	re := n.Copy()
	re.Fence = nil
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: re})
	if f.node("n1").Fence == nil {
		t.Fatal("re-registering the node lifted its fence")
	}

	// A fenced node takes no new claim, even while it heartbeats.
	_, err := f.apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw",
		Claim: &structs.Claim{AllocID: "a5", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimTaken}})
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("claim on a fenced node: err = %v, want a conflict naming the fence", err)
	}

	f.must(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: "n1", Accessor: "acc-2"})
	if f.node("n1").Fence != nil {
		t.Fatal("unfence left the fence")
	}
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw",
		Claim: &structs.Claim{AllocID: "a5", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimTaken}})
}

func TestNodeLiveness(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-mw", "a1", structs.ClaimWrite)
	volIdx := f.volume("default", "vol-mw").ModifyIndex
	at := t0.Add(30e9)

	f.must(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "n1", From: structs.NodeReady,
		Status: structs.NodeDown, Reason: "no heartbeat for 30s", Time: at})
	n := f.node("n1")
	if n.Status != structs.NodeDown || !n.HeartbeatLost || n.StatusReason != "no heartbeat for 30s" || !n.StatusSince.Equal(at) {
		t.Fatalf("node after down = %+v", n)
	}
	if f.volume("default", "vol-mw").ModifyIndex == volIdx {
		t.Fatal("down did not wake the volumes claimed on the node")
	}
	evs := f.events()
	if last := evs[len(evs)-1]; last.Type != structs.EventNodeStatus || last.Fields["to"] != "down" || last.Fields["from"] != "ready" {
		t.Fatalf("last event = %+v", last)
	}

	// A stale decision (the tracker thought the node was still ready) is refused.
	before := f.digest()
	_, err := f.apply(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "n1", From: structs.NodeReady,
		Status: structs.NodeDown, Time: at})
	if !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("stale transition: err = %v, want conflict", err)
	}
	if f.digest() != before {
		t.Fatal("a refused transition changed the state")
	}

	f.must(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "n1", From: structs.NodeDown,
		Status: structs.NodeGone, Reason: "down for longer than node_gc_threshold", Time: at.Add(60e9)})
	if n := f.node("n1"); n.Status != structs.NodeGone || !n.HeartbeatLost {
		t.Fatalf("node after gone = %+v", n)
	}

	f.must(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "n1", From: structs.NodeGone,
		Status: structs.NodeReady, Time: at.Add(90e9)})
	if n := f.node("n1"); n.Status != structs.NodeReady || n.HeartbeatLost || !n.LastSeen.Equal(at.Add(90e9)) {
		t.Fatalf("node after heartbeat = %+v", n)
	}

	// An operator's status is not a lost heartbeat.
	f.must(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "n1", From: structs.NodeReady,
		Status: structs.NodeDown, Time: at.Add(120e9)})
	f.must(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n1", Status: structs.NodeDown})
	if n := f.node("n1"); n.HeartbeatLost {
		t.Fatal("an operator's status update kept heartbeat_lost")
	}
}

// A module's fence (ABI 1.1) is committed only for the heartbeat loss the
// module was asked about, with an audit event in the same entry; for a
// node that is ready, heartbeated since, or is fenced already, it is
// refused and nothing changes.
func TestModuleFence(t *testing.T) {
	lost := t0.Add(time.Minute)
	moduleFence := func(since time.Time) *structs.NodeFenceRequest {
		return &structs.NodeFenceRequest{NodeID: "n1", LostSince: since, Fence: &structs.NodeFence{
			Reason: "instance terminated", Source: structs.FenceSourceModule("fence-adapter", "1.1.0"), Time: lost.Add(time.Minute)}}
	}
	f := newFixture(t)
	refused := func(req *structs.NodeFenceRequest, want string) {
		t.Helper()
		before := f.digest()
		_, err := f.apply(structs.NodeFenceType, req)
		if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want a conflict containing %q", err, want)
		}
		if f.digest() != before {
			t.Fatal("a refused module fence changed the state")
		}
	}
	refused(moduleFence(t0), "heartbeating")
	f.must(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "n1", From: structs.NodeReady,
		Status: structs.NodeDown, Reason: "missed heartbeats", Time: lost})
	refused(moduleFence(lost.Add(-time.Second)), "not since")
	refused(moduleFence(time.Time{}), "not since")

	f.must(structs.NodeFenceType, moduleFence(lost))
	n := f.node("n1")
	if n.Fence == nil || !n.Fence.ByModule() || n.Fence.Source != "module:fence-adapter@1.1.0" || n.Fence.Reason != "instance terminated" {
		t.Fatalf("fence = %+v", n.Fence)
	}
	evs := f.events()
	audit, fence := evs[len(evs)-1], evs[len(evs)-2]
	if fence.Type != structs.EventNodeFence || fence.Fields["source"] != "module:fence-adapter@1.1.0" {
		t.Fatalf("fence event = %+v", fence)
	}
	if audit.Type != structs.EventAudit || audit.Fields["action"] != "node-fence" || audit.Fields["accessor"] != "module:fence-adapter@1.1.0" {
		t.Fatalf("audit event = %+v", audit)
	}
	refused(moduleFence(lost), "already fenced")
}
