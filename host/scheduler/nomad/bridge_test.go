package nomad

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

var metaV1 = map[string]string{"volhost_volume_data": "v1"}

func web(id, node, client, desired string) Alloc {
	return Alloc{ID: id, Namespace: "default", NodeID: "id-" + node, NodeName: node, JobID: "web", TaskGroup: "g",
		ClientStatus: client, DesiredStatus: desired}
}

// relist fires the bridge's re-list ticker and waits for the list to be
// applied.
func (h *harness) relist() {
	h.t.Helper()
	before := h.bridge.Status().LastList
	h.advance(time.Minute)
	testutil.WaitFor(h.t, "a re-list", func() bool { return h.bridge.Status().LastList.After(before) })
}

// TestBridgeClaimAndRelease: a placed allocation that declares a volume is
// mirrored and claimed; it ends when its client reports complete.
func TestBridgeClaimAndRelease(t *testing.T) {
	h := newHarness(t)
	h.start()
	a := h.nomad.setAlloc(web("a1", "n1", clientPending, "run"), metaV1)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	h.waitStatus("a1", structs.AllocPending)
	testutil.WaitFor(t, "the claim of v1", func() bool { return h.claimed("v1", "a1") })
	if got := h.alloc("a1"); got.Source != SourceName || got.NodeID != "n1" {
		t.Fatalf("alloc = %+v", got)
	}
	a = h.nomad.setAlloc(web("a1", "n1", clientRunning, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	h.waitStatus("a1", structs.AllocRunning)
	a = h.nomad.setAlloc(web("a1", "n1", clientComplete, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	h.waitStatus("a1", structs.AllocComplete)
	testutil.WaitFor(t, "the cursor at the last batch", func() bool { return h.cursor() == a.ModifyIndex })
	if n := len(h.w.claims); n != 1 {
		t.Fatalf("%d claims made, want 1: %v", n, h.w.claims)
	}
	// An allocation without volhost volumes is not mirrored.
	b := h.nomad.setAlloc(web("b1", "n1", clientRunning, "run"), map[string]string{"team": "x"})
	h.nomad.push(t, Batch{Allocs: []Alloc{b}})
	h.relist()
	if h.alloc("b1") != nil {
		t.Fatal("an allocation declaring no volume was mirrored")
	}
}

// TestBridgeShutdownDelay: desired status stop with the client still
// pending (shutdown_delay) or running is live: no terminal status until
// the client says so (hashicorp/nomad #24130, #25819).
func TestBridgeShutdownDelay(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.mirrorRunning("a1", "n1")
	for _, client := range []string{clientRunning, clientPending} {
		a := h.nomad.setAlloc(web("a1", "n1", client, "stop"), nil)
		h.nomad.push(t, Batch{Allocs: []Alloc{a}})
		testutil.WaitFor(t, "the batch applied", func() bool { return h.bridge.Status().LastEvent.Equal(h.clock.Now()) && h.streamDrained() })
		h.relist()
		if got := h.alloc("a1").ClientStatus; got.Terminal() {
			t.Fatalf("desired stop, client %s: mirrored %s", client, got)
		}
	}
	a := h.nomad.setAlloc(web("a1", "n1", clientComplete, "stop"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	h.waitStatus("a1", structs.AllocComplete)
}

// streamDrained: the newest stream's buffered batches were all read.
func (h *harness) streamDrained() bool {
	h.nomad.mu.Lock()
	defer h.nomad.mu.Unlock()
	return len(h.nomad.streams[len(h.nomad.streams)-1]) == 0
}

// TestBridgeLostHeldUntilFence: a node down, its allocation lost: the
// volhost node goes down as a lost heartbeat does, the allocation stays
// live (its task may run there) with one event, until an operator fences
// the node.
func TestBridgeLostHeldUntilFence(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.heldOnDownNode("a1", "n2")
	vn, _ := h.store.Snapshot().NodeByID(nil, "n2")
	if vn.Status != structs.NodeDown || !vn.HeartbeatLost || !strings.Contains(vn.StatusReason, "Nomad reports the node down") {
		t.Fatalf("node n2 = %+v", vn)
	}
	testutil.WaitFor(t, "the hold's event", func() bool { return len(h.events("held until the node is fenced")) == 1 })
	h.relist()
	if got := h.alloc("a1").ClientStatus; got != structs.AllocRunning {
		t.Fatalf("lost on a down node mirrored as %s before any fence", got)
	}
	if n := len(h.events("held until the node is fenced")); n != 1 {
		t.Fatalf("%d hold events after a re-list, want 1", n)
	}
	h.fence("n2")
	h.waitStatus("a1", structs.AllocLost)
	testutil.WaitFor(t, "no hold", func() bool { return h.bridge.Status().Held == 0 })
}

// TestBridgeNodeGone: Nomad's system gc removes a node with no event; the
// re-list sees it gone, and the allocation held there ends.
func TestBridgeNodeGone(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.mirrorRunning("a1", "n2")
	h.lostOnDownNode("a1", "n2")
	h.nomad.remove([]string{"id-n2"}, []string{"a1"})
	h.relist()
	h.waitStatus("a1", structs.AllocLost)
	vn, _ := h.store.Snapshot().NodeByID(nil, "n2")
	if vn.Status != structs.NodeGone || !strings.Contains(vn.StatusReason, "removed from Nomad") {
		t.Fatalf("node n2 = %+v", vn)
	}
	if len(h.events("was removed from Nomad")) != 1 {
		t.Fatal("no event for the node's removal")
	}
}

// TestBridgeVanishedAllocation: an allocation Nomad garbage-collected
// between two lists (its terminal event missed) has ended.
func TestBridgeVanishedAllocation(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.mirrorRunning("a1", "n1")
	h.nomad.remove(nil, []string{"a1"})
	h.relist()
	h.waitStatus("a1", structs.AllocLost)
}

// TestBridgeResume: a new leader's bridge reads the committed cursor,
// lists, and claims nothing twice; a replayed older change is ignored.
func TestBridgeResume(t *testing.T) {
	h := newHarness(t)
	h.start()
	old := h.nomad.setAlloc(web("a1", "n1", clientPending, "run"), metaV1)
	a := h.nomad.setAlloc(web("a1", "n1", clientRunning, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	testutil.WaitFor(t, "the claim of v1", func() bool { return h.claimed("v1", "a1") })
	h.stop()
	cur := h.cursor()
	if cur == 0 {
		t.Fatal("no cursor committed")
	}
	h.w.mu.Lock()
	h.w.term = 2
	h.w.mu.Unlock()
	h.startTerm(2)
	if from := h.nomad.from[len(h.nomad.from)-1]; from != h.nomad.index+1 {
		t.Fatalf("streaming from %d, want the list's index + 1 = %d", from, h.nomad.index+1)
	}
	// A replay of an older change (streams start at the older list's
	// index) does not move the allocation back.
	h.nomad.push(t, Batch{Index: old.ModifyIndex, Allocs: []Alloc{old}})
	done := h.nomad.setAlloc(web("a1", "n1", clientComplete, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{done}})
	h.waitStatus("a1", structs.AllocComplete)
	if n := len(h.w.claims); n != 1 {
		t.Fatalf("%d claims after the leader change, want 1: %v", n, h.w.claims)
	}
	if h.cursor() < cur {
		t.Fatalf("cursor went back from %d to %d", cur, h.cursor())
	}
}

// TestBridgeStaleTerm: a bridge still running for a term this server no
// longer leads in commits nothing: no allocation, no cursor, no claim, and
// no node status (Nomad reports n2 down: only the current leader's bridge
// may mark it so).
func TestBridgeStaleTerm(t *testing.T) {
	h := newHarness(t)
	h.w.term = 2
	h.nomad.setAlloc(web("a1", "n1", clientRunning, "run"), metaV1)
	h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeDown})
	h.run(1)
	testutil.WaitFor(t, "the refused commit on the status line", func() bool {
		return strings.Contains(h.bridge.Status().LastError, "term")
	})
	h.advance(time.Second) // the backoff: refused again
	h.stop()
	if h.alloc("a1") != nil || h.cursor() != 0 || len(h.w.claims) != 0 {
		t.Fatalf("a stale term wrote: alloc %+v, cursor %d, claims %v", h.alloc("a1"), h.cursor(), h.w.claims)
	}
	if vn, _ := h.store.Snapshot().NodeByID(nil, "n2"); vn.Status != structs.NodeReady {
		t.Fatalf("a stale term marked node n2 %s", vn.Status)
	}
}

// TestBridgeVanishedOnDownNodeHeld: an allocation that vanishes from
// Nomad's list while its node is down (a server-side GC, or a Nomad that
// lost it) may still run there: it is held like a lost one, not ended,
// until the node is fenced.
func TestBridgeVanishedOnDownNodeHeld(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.claimRunning("a1", "n2")
	n := h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeDown})
	h.nomad.push(t, Batch{Nodes: []Node{n}})
	testutil.WaitFor(t, "node n2 down", h.nodeIs("n2", structs.NodeDown))
	h.nomad.remove(nil, []string{"a1"})
	h.relist()
	h.relist()
	if got := h.alloc("a1").ClientStatus; got != structs.AllocRunning {
		t.Fatalf("vanished on a down, unfenced node: mirrored %s", got)
	}
	if st := h.bridge.Status(); st.Held != 1 {
		t.Fatalf("held %d, want 1", st.Held)
	}
	h.fence("n2")
	h.waitStatus("a1", structs.AllocLost)
}

// TestBridgeReset: Nomad's index going backwards (a restarted dev agent)
// is a reset: recorded, counted, and everything listed again.
func TestBridgeReset(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.mirrorRunning("a1", "n1")
	h.relist()
	// Nomad restarts with empty state: indexes start again, a1 is gone.
	h.nomad.mu.Lock()
	h.nomad.index, h.nomad.allocs = 2, map[string]Alloc{}
	h.nomad.mu.Unlock()
	h.nomad.push(t, Batch{Index: 1, Err: errUnreachable})
	// Once retrying, the session's re-list ticker is stopped: the clock's
	// only waiter is the backoff.
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	h.advance(time.Second)
	testutil.WaitFor(t, "the reset", func() bool { return h.bridge.Status().Resets == 1 })
	h.waitStatus("a1", structs.AllocLost)
	if h.cursor() != 2 || len(h.events("went back")) != 1 {
		t.Fatalf("cursor %d, reset events %d", h.cursor(), len(h.events("went back")))
	}
}

// TestBridgeBadInput: an unknown volume, a volume already claimed for
// writing, an unreachable Nomad: one event and one status line each, not
// repeated while they last, and the bridge keeps mirroring the rest.
func TestBridgeBadInput(t *testing.T) {
	h := newHarness(t)
	h.start()
	bad := h.nomad.setAlloc(web("bad", "n1", clientRunning, "run"), map[string]string{"volhost_volume_x": "nope"})
	first := h.nomad.setAlloc(web("w1", "n1", clientRunning, "run"), metaV1)
	h.nomad.push(t, Batch{Allocs: []Alloc{bad, first}})
	testutil.WaitFor(t, "the claim of v1 by w1", func() bool { return h.claimed("v1", "w1") })
	h.w.mu.Lock()
	h.w.claimErr["v1"] = structs.Conflict("volume \"default/v1\" already has its 1 writer(s) (single-node-writer): w1")
	h.w.mu.Unlock()
	second := h.nomad.setAlloc(web("w2", "n1", clientRunning, "run"), metaV1)
	ok := h.nomad.setAlloc(web("ok", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{second, ok}})
	testutil.WaitFor(t, "the claim of v2", func() bool { return h.claimed("v2", "ok") })
	testutil.WaitFor(t, "both refusals as events", func() bool {
		return len(h.events("nope is not registered")) == 1 && len(h.events("already has its 1 writer")) == 1
	})
	h.relist()
	h.relist()
	if a, b := len(h.events("nope is not registered")), len(h.events("already has its 1 writer")); a != 1 || b != 1 {
		t.Fatalf("events after two re-lists: unknown volume %d, writer %d; want 1 each", a, b)
	}
	st := h.bridge.Status()
	var lines []string
	for _, p := range st.Problems {
		lines = append(lines, p.Message)
	}
	all := strings.Join(lines, "\n")
	for _, w := range []string{"volume default/nope is not registered", "allocation w2", "already has its 1 writer"} {
		if !strings.Contains(all, w) {
			t.Errorf("status problems %q do not say %q", all, w)
		}
	}
	if st.Live != 4 || st.Claims != 2 {
		t.Fatalf("status %+v", st)
	}

	// Nomad unreachable: one event, the status says it, and the bridge
	// catches up once Nomad answers.
	h.unreachable()
	h.nomad.push(t, Batch{Err: errUnreachable})
	testutil.WaitFor(t, "the retrying state", func() bool {
		st := h.bridge.Status()
		return st.State == scheduler.StateRetrying && strings.Contains(st.LastError, "connection refused")
	})
	for range 3 {
		h.advance(time.Minute)
	}
	if n := len(h.events("connection refused")); n != 1 {
		t.Fatalf("%d events for an unreachable Nomad, want 1", n)
	}
	h.nomad.mu.Lock()
	h.nomad.listErr = nil
	h.nomad.mu.Unlock()
	h.nomad.setAlloc(web("ok", "n1", clientComplete, "run"), nil)
	h.advance(time.Minute)
	h.waitStatus("ok", structs.AllocComplete)
	testutil.WaitFor(t, "streaming again", func() bool {
		st := h.bridge.Status()
		return st.State == scheduler.StateStreaming && st.LastError == ""
	})
	testutil.WaitFor(t, "the reconnection event", func() bool { return len(h.events("again")) == 1 })
}

// TestBridgeNewLeaderNomadUnreachable: a new leader's bridge that cannot
// reach Nomad has applied nothing yet; the event it records commits the
// cursor it resumed from, never a lower one (the store would refuse that
// as going backwards, and the event would be lost).
func TestBridgeNewLeaderNomadUnreachable(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.mirrorRunning("a1", "n1")
	h.relist()
	h.stop()
	cur := h.cursor()
	if cur == 0 {
		t.Fatal("no cursor committed")
	}
	h.w.mu.Lock()
	h.w.term = 2
	h.w.mu.Unlock()
	h.unreachable()
	h.run(2)
	testutil.WaitFor(t, "the unreachable Nomad's event", func() bool { return len(h.events("connection refused")) == 1 })
	if got := h.cursor(); got != cur {
		t.Fatalf("cursor %d after the new leader's event, want %d", got, cur)
	}
}

// TestNomadAddressCredentialsNeverShown: an address may carry user
// information (https://user:password@nomad:4646), which the Nomad client
// sends as basic authentication: a credential, like the token. The status
// (GET /v1/scheduler/status, operator:read), the events (committed to the
// log and to snapshots) and the errors show the address without it.
func TestNomadAddressCredentialsNeverShown(t *testing.T) {
	h := newHarnessWith(t, Config{RelistInterval: "1m", Address: "https://ops:hunter2@nomad.example:4646"})
	h.start()
	if got := h.bridge.Status().Address; got != "https://nomad.example:4646" {
		t.Fatalf("status address %q, want it without its user information", got)
	}
	// Nomad unreachable, then back: an error line, its event and the
	// reconnection event each name the address.
	h.unreachable()
	h.nomad.push(t, Batch{Err: errUnreachable})
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	h.advance(time.Minute)
	testutil.WaitFor(t, "a failed re-list naming the address", func() bool {
		return strings.Contains(h.bridge.Status().LastError, "nomad.example")
	})
	h.nomad.mu.Lock()
	h.nomad.listErr = nil
	h.nomad.mu.Unlock()
	h.advance(time.Minute)
	testutil.WaitFor(t, "the reconnection event", func() bool { return len(h.events("again")) == 1 })
	st, err := json.Marshal(h.bridge.Status())
	if err != nil {
		t.Fatal(err)
	}
	shown := string(st)
	for _, e := range h.events("") {
		shown += "\n" + e.Message
	}
	if strings.Contains(shown, "hunter2") || strings.Contains(shown, "ops:") {
		t.Fatalf("the address's credentials are shown:\n%s", shown)
	}
	if !strings.Contains(shown, "nomad.example:4646") {
		t.Fatalf("the address is not shown at all:\n%s", shown)
	}
}

// TestJobAuthorCannotClaimAnotherNamespace: a Nomad job author names
// volumes in its group meta, with a volhost namespace if it likes. The
// allocation is mirrored in its Nomad namespace, and the store refuses a
// claim by an allocation of one namespace on a volume of another: a job
// in "dev" naming "default/v1" gets one refusal (a problem line and an
// event), never the volume.
func TestJobAuthorCannotClaimAnotherNamespace(t *testing.T) {
	h := newHarness(t)
	h.start()
	a := web("dev-1", "n1", clientRunning, "run")
	a.Namespace = "dev"
	a = h.nomad.setAlloc(a, map[string]string{"volhost_volume_data": "default/v1"})
	ok := h.nomad.setAlloc(web("ok", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{a, ok}})
	testutil.WaitFor(t, "the claim of v2", func() bool { return h.claimed("v2", "ok") })
	testutil.WaitFor(t, "the refusal as an event", func() bool { return len(h.events("namespace")) == 1 })
	if h.claimed("v1", "dev-1") {
		t.Fatal("an allocation of Nomad namespace dev claimed volume default/v1")
	}
	if ev := h.events("namespace")[0]; !strings.Contains(ev.Message, "dev-1") {
		t.Fatalf("refusal event %q does not name the allocation", ev.Message)
	}
}
