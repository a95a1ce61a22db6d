package nomad

import (
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// The bridge's rules that no other test breaks: each test here fails when
// its rule is removed from the bridge (checked by breaking it once).

// TestBridgeReplayIgnored: a stream starts at the older list's index and
// replays changes the list already showed. A replayed node ready and
// allocation running, older than the down and lost they were followed by,
// must not mark the node ready again nor end the hold: a replayed "ready"
// would release a claim under a task that may still run.
func TestBridgeReplayIgnored(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.nomad.mu.Lock()
	ready := h.nomad.nodes["id-n2"]
	h.nomad.mu.Unlock()
	running := h.claimRunning("a1", "n2")
	down := h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeDown})
	lost := h.nomad.setAlloc(web("a1", "n2", clientLost, "stop"), nil)
	h.nomad.push(t, Batch{Nodes: []Node{down}, Allocs: []Alloc{lost}})
	testutil.WaitFor(t, "the hold", func() bool { return h.bridge.Status().Held == 1 })

	h.reconnect()
	h.nomad.push(t, Batch{Index: running.ModifyIndex, Nodes: []Node{ready}, Allocs: []Alloc{running}})
	// A later batch: once it is applied, so was the replay.
	marker := h.nomad.setAlloc(web("m1", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{marker}})
	h.waitStatus("m1", structs.AllocRunning)

	if vn, _ := h.store.Snapshot().NodeByID(nil, "n2"); vn.Status != structs.NodeDown {
		t.Fatalf("node n2 %s after a replayed older ready", vn.Status)
	}
	if got := h.alloc("a1").ClientStatus; got != structs.AllocRunning {
		t.Fatalf("allocation a1 %s after replayed older changes, want running (held)", got)
	}
	if held := h.bridge.Status().Held; held != 1 {
		t.Fatalf("held %d after a replayed older running, want 1", held)
	}
}

// TestBridgeStreamsFromOlderList: the node and allocation lists answer
// each at its own table's index; the stream starts after the older one,
// or a node change made between the two lists would never be seen.
func TestBridgeStreamsFromOlderList(t *testing.T) {
	h := newHarness(t)
	h.nomad.mu.Lock()
	h.nomad.nodesIndex = h.nomad.index
	h.nomad.mu.Unlock()
	h.nomad.setAlloc(web("a1", "n1", clientRunning, "run"), metaV1)
	h.start()
	h.nomad.mu.Lock()
	from, want := h.nomad.from[0], h.nomad.nodesIndex+1
	h.nomad.mu.Unlock()
	if from != want {
		t.Fatalf("streaming from %d, want the node list's index + 1 = %d", from, want)
	}
}

// TestBridgeStreamIndexBackwards: a stream whose index goes backwards
// comes from a Nomad that lost its state: the bridge lists again rather
// than apply changes whose indexes compare with nothing it knows.
func TestBridgeStreamIndexBackwards(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.mirrorRunning("a1", "n1")
	n := h.nomad.streamCount()
	h.nomad.push(t, Batch{Index: 1})
	testutil.WaitFor(t, "the backwards stream as an event", func() bool { return len(h.events("went backwards")) == 1 })
	h.advance(time.Second)
	testutil.WaitFor(t, "a re-list and a new stream", func() bool { return h.nomad.streamCount() > n })
}

// TestBridgeClaimsOnlyLive: the bridge claims only for an allocation
// placed, live and not being stopped. A refused claim is tried again at
// the next re-list, but not once the allocation ended, is held (lost on a
// down node: its tasks may run, the node is no place to publish), or is
// being stopped (a shutdown_delay is no time to mount a volume). Each
// such try would be a refused claim and one more event.
func TestBridgeClaimsOnlyLive(t *testing.T) {
	h := newHarness(t)
	h.w.mu.Lock()
	h.w.claimErr["v1"] = structs.Conflict("volume \"default/v1\" is busy")
	h.w.mu.Unlock()
	h.start()
	var allocs []Alloc
	for _, id := range []string{"done", "held", "stopping"} {
		node := "n1"
		if id == "held" {
			node = "n2"
		}
		allocs = append(allocs, h.nomad.setAlloc(web(id, node, clientRunning, "run"), metaV1))
	}
	h.nomad.push(t, Batch{Allocs: allocs})
	testutil.WaitFor(t, "three refused claims", func() bool { return len(h.events("is busy")) == 3 })

	down := h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeDown})
	allocs = []Alloc{
		h.nomad.setAlloc(web("done", "n1", clientComplete, "run"), nil),
		h.nomad.setAlloc(web("held", "n2", clientLost, "stop"), nil),
		h.nomad.setAlloc(web("stopping", "n1", clientRunning, "stop"), nil),
	}
	h.nomad.push(t, Batch{Nodes: []Node{down}, Allocs: allocs})
	h.waitStatus("done", structs.AllocComplete)
	testutil.WaitFor(t, "the hold", func() bool { return h.bridge.Status().Held == 1 })

	h.w.mu.Lock()
	delete(h.w.claimErr, "v1")
	h.w.mu.Unlock()
	h.relist()
	h.relist()
	// Two later claims, each queued after the re-lists' (the claim queue
	// is in order): once both are made, any claim those queued was tried.
	for _, id := range []string{"m1", "m2"} {
		m := h.nomad.setAlloc(web(id, "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
		h.nomad.push(t, Batch{Allocs: []Alloc{m}})
		testutil.WaitFor(t, "the claim of v2 by "+id, func() bool { return h.claimed("v2", id) })
	}
	for _, id := range []string{"done", "held", "stopping"} {
		if n := h.attempts(id); n != 1 {
			t.Errorf("allocation %s: %d claims tried, want the 1 before it stopped being live", id, n)
		}
	}
}

// TestBridgeOneClaimInFlight: a claim still running (a CSI publish takes
// seconds) is not queued again by the events and re-lists that arrive
// meanwhile.
func TestBridgeOneClaimInFlight(t *testing.T) {
	h := newHarness(t)
	gate := make(chan struct{})
	h.w.claimGate = gate
	h.start()
	a := h.nomad.setAlloc(web("a1", "n1", clientPending, "run"), metaV1)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	testutil.WaitFor(t, "the claim in flight", func() bool { return h.attempts("a1") == 1 })
	a = h.nomad.setAlloc(web("a1", "n1", clientRunning, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	h.waitStatus("a1", structs.AllocRunning)
	h.relist()
	close(gate)
	testutil.WaitFor(t, "the claim of v1", func() bool { return h.claimed("v1", "a1") })
	// A later claim, queued after any the re-list queued.
	m := h.nomad.setAlloc(web("m1", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{m}})
	testutil.WaitFor(t, "the claim of v2", func() bool { return h.claimed("v2", "m1") })
	if n := h.attempts("a1"); n != 1 {
		t.Fatalf("%d claims tried for a1, want 1", n)
	}
}

// TestBridgeNodeStatus: Nomad's node down, back and disconnected are
// mirrored onto a volhost node registered by hand; a node registered by a
// volhost node agent is left alone (its heartbeats own its status).
func TestBridgeNodeStatus(t *testing.T) {
	h := newHarness(t)
	h.agentOwnsNode("n2")
	h.start()
	n1 := h.nomad.setNode(Node{ID: "id-n1", Name: "n1", Status: nodeDown})
	n2 := h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeDown})
	h.nomad.push(t, Batch{Nodes: []Node{n2, n1}})
	testutil.WaitFor(t, "node n1 down", h.nodeIs("n1", structs.NodeDown))
	if vn, _ := h.store.Snapshot().NodeByID(nil, "n2"); vn.Status != structs.NodeReady {
		t.Fatalf("a node agent's node n2 marked %s by Nomad's report", vn.Status)
	}
	n1 = h.nomad.setNode(Node{ID: "id-n1", Name: "n1", Status: nodeReady})
	h.nomad.push(t, Batch{Nodes: []Node{n1}})
	testutil.WaitFor(t, "node n1 ready again", h.nodeIs("n1", structs.NodeReady))
	// A disconnected client (max_client_disconnect) has stopped answering
	// too: down in volhost, its node steps held until a fence.
	n1 = h.nomad.setNode(Node{ID: "id-n1", Name: "n1", Status: nodeDisconnected})
	h.nomad.push(t, Batch{Nodes: []Node{n1}})
	testutil.WaitFor(t, "node n1 down when disconnected", h.nodeIs("n1", structs.NodeDown))
}

// TestBridgeLeavesAPIAllocations: an allocation an operator registered
// through the API is not the bridge's to change (the store refuses it);
// the bridge says so on a problem line and keeps mirroring the rest,
// rather than fail every batch that carries it.
func TestBridgeLeavesAPIAllocations(t *testing.T) {
	h := newHarness(t)
	if err := h.w.apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", JobID: "ops", ClientStatus: structs.AllocRunning}}}, 0); err != nil {
		t.Fatal(err)
	}
	h.start()
	a := h.nomad.setAlloc(web("a1", "n1", clientComplete, "run"), metaV1)
	b := h.nomad.setAlloc(web("b1", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{a, b}})
	testutil.WaitFor(t, "the claim of v2 by b1", func() bool { return h.claimed("v2", "b1") })
	if got := h.alloc("a1"); got.ClientStatus != structs.AllocRunning || got.Source != "" {
		t.Fatalf("the operator's allocation a1 = %+v", got)
	}
	testutil.WaitFor(t, "the problem's event", func() bool { return len(h.events("registered through the API")) == 1 })
	var found bool
	for _, p := range h.bridge.Status().Problems {
		found = found || strings.Contains(p.Message, "registered through the API")
	}
	if !found {
		t.Fatal("no problem line for the operator's allocation")
	}
}

// TestBridgeTerminalReplay: after an allocation ended (and the bridge
// forgot it), a new stream replays its older running. Terminal is for
// good in the store: the bridge must drop the replay, not send it, or the
// store refuses the whole batch and the bridge fails every session that
// replays it, mirroring nothing else.
func TestBridgeTerminalReplay(t *testing.T) {
	h := newHarness(t)
	h.start()
	running := h.mirrorRunning("a1", "n1")
	done := h.nomad.setAlloc(web("a1", "n1", clientComplete, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{done}})
	h.waitStatus("a1", structs.AllocComplete)
	h.reconnect()
	h.nomad.push(t, Batch{Index: running.ModifyIndex, Allocs: []Alloc{running}})
	marker := h.nomad.setAlloc(web("m1", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{marker}})
	h.waitStatus("m1", structs.AllocRunning)
	if got := h.alloc("a1").ClientStatus; got != structs.AllocComplete {
		t.Fatalf("allocation a1 %s after a replayed running", got)
	}
	if evs, st := h.events("committing"), h.bridge.Status(); len(evs) != 0 || st.LastError != "" {
		t.Fatalf("a refused commit after the replay: %d events, last error %q", len(evs), st.LastError)
	}
}

// TestBridgeSkipsEndedAllocations: Nomad lists its ended allocations until
// it garbage-collects them. One that ended before the bridge mirrored it,
// or that ended in volhost already, has nothing left to do: no job meta is
// read for it, at any re-list (a read per ended allocation per re-list
// would load Nomad for nothing).
func TestBridgeSkipsEndedAllocations(t *testing.T) {
	h := newHarness(t)
	for i := range 3 {
		h.nomad.setAlloc(web("old"+string(rune('0'+i)), "n1", clientComplete, "run"), metaV1)
	}
	h.start()
	h.relist()
	h.nomad.mu.Lock()
	hits := h.nomad.metaHits
	h.nomad.mu.Unlock()
	if hits != 0 {
		t.Fatalf("%d job meta reads for allocations that had ended, want 0", hits)
	}
	if h.alloc("old0") != nil {
		t.Fatal("an allocation that ended before it was seen was mirrored")
	}
	// Nor for one that ended once mirrored (after a new leader's first
	// list, and at every re-list, until Nomad garbage-collects it).
	h.mirrorRunning("a1", "n1")
	a := h.nomad.setAlloc(web("a1", "n1", clientComplete, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	h.waitStatus("a1", structs.AllocComplete)
	h.relist()
	h.stop()
	h.startTerm(1)
	h.relist()
	h.nomad.mu.Lock()
	hits = h.nomad.metaHits
	h.nomad.mu.Unlock()
	if hits != 1 {
		t.Fatalf("%d job meta reads, want the 1 of a1 when it was placed", hits)
	}
}

// TestBridgeHeldWhenNodeBack: Nomad reports a node ready at its first
// heartbeat, before its client has stopped the allocations it lost, so a
// node back does not end a hold; the client's next report does (running
// with desired stop: live, then complete: ended). A node agent's node
// keeps its volhost status whatever Nomad says, so only the Nomad node's
// own status event judges its holds again: that is checked too.
func TestBridgeHeldWhenNodeBack(t *testing.T) {
	h := newHarness(t)
	h.agentOwnsNode("n2")
	h.start()
	h.heldOnDownNode("a1", "n2")
	back := h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeReady})
	h.nomad.push(t, Batch{Nodes: []Node{back}})
	testutil.WaitFor(t, "the hold's new reason", func() bool { return len(h.events("its node is back")) == 1 })
	h.relist()
	if got, held := h.alloc("a1").ClientStatus, h.bridge.Status().Held; got != structs.AllocRunning || held != 1 {
		t.Fatalf("node back, client silent: a1 %s, held %d; want running, held 1", got, held)
	}
	// The client stops what it lost: it reports running (desired stop),
	// then complete.
	a := h.nomad.setAlloc(web("a1", "n2", clientRunning, "stop"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	testutil.WaitFor(t, "no hold", func() bool { return h.bridge.Status().Held == 0 })
	if got := h.alloc("a1").ClientStatus; got != structs.AllocRunning {
		t.Fatalf("a1 %s while its client stops it", got)
	}
	a = h.nomad.setAlloc(web("a1", "n2", clientComplete, "stop"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	h.waitStatus("a1", structs.AllocComplete)
}

// TestBridgeVanishedOnNodeBack: an allocation held on a down node that
// Nomad stops listing once the node is back (garbage-collected: the
// client never reported it again, a client whose state was wiped) has
// ended: the client stops what the server no longer lists.
func TestBridgeVanishedOnNodeBack(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.heldOnDownNode("a1", "n2")
	back := h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeReady})
	h.nomad.push(t, Batch{Nodes: []Node{back}})
	testutil.WaitFor(t, "node n2 ready", h.nodeIs("n2", structs.NodeReady))
	h.relist()
	if got := h.alloc("a1").ClientStatus; got != structs.AllocRunning {
		t.Fatalf("a1 %s with its node back and its client silent", got)
	}
	h.nomad.remove(nil, []string{"a1"})
	h.relist()
	h.waitStatus("a1", structs.AllocLost)
	testutil.WaitFor(t, "no hold", func() bool { return h.bridge.Status().Held == 0 })
}

// TestBridgeNamespaceDropped: an allocation mirrored from a namespace the
// configuration no longer names is missing from the lists because the
// bridge stopped asking, not because Nomad dropped it: it may run, so it
// is left as it was (a problem line says so), never judged vanished.
func TestBridgeNamespaceDropped(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.claimRunning("a1", "n1")
	h.stop()
	// The agent restarts with namespaces = ["prod"]: Nomad's lists (the
	// real client asks per namespace) no longer carry a1.
	set, err := Config{RelistInterval: "1m", Namespaces: []string{"prod"}}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	h.bridge, err = New(set, Deps{Nomad: h.nomad, Writer: h.w, Store: h.store, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	h.nomad.mu.Lock()
	delete(h.nomad.allocs, "a1")
	h.nomad.mu.Unlock()
	h.startTerm(1)
	h.relist()
	if got := h.alloc("a1").ClientStatus; got != structs.AllocRunning {
		t.Fatalf("an allocation of a namespace no longer mirrored was mirrored %s", got)
	}
	testutil.WaitFor(t, "the problem's event", func() bool { return len(h.events("no longer mirrors")) == 1 })
}
