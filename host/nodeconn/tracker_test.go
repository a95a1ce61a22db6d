package nodeconn

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
)

// memNodes is a node table that applies liveness transitions like the
// store does (refusing a stale From).
type memNodes struct {
	mu     sync.Mutex
	nodes  map[string]*structs.Node
	writes []*structs.NodeLivenessRequest
}

func (m *memNodes) Nodes() ([]*structs.Node, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*structs.Node
	for _, n := range m.nodes {
		out = append(out, n.Copy())
	}
	return out, nil
}

func (m *memNodes) Node(id string) (*structs.Node, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodes[id].Copy(), nil
}

func (m *memNodes) NodeLiveness(_ context.Context, r *structs.NodeLivenessRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[r.NodeID]
	if n.Status != r.From {
		return structs.Conflict("stale")
	}
	m.writes = append(m.writes, r)
	n.Status, n.HeartbeatLost, n.StatusSince = r.Status, r.Status != structs.NodeReady, r.Time
	return nil
}

func (m *memNodes) status(id string) structs.NodeStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodes[id].Status
}

func (m *memNodes) writeCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.writes)
}

const ttl = 30 * time.Second

func newTracker(t *testing.T) (*Tracker, *memNodes, *clockwork.FakeClock) {
	t.Helper()
	clk := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	m := &memNodes{nodes: map[string]*structs.Node{
		"a1":     {ID: "a1", Status: structs.NodeReady, Agent: true},
		"a2":     {ID: "a2", Status: structs.NodeReady, Agent: true},
		"direct": {ID: "direct", Status: structs.NodeReady},
	}}
	tr := NewTracker(TrackerConfig{TTL: ttl, GCThreshold: time.Hour, Grace: ttl, Clock: clk}, m, m)
	return tr, m, clk
}

// Down after the TTL without a heartbeat, gone after node_gc_threshold
// down, ready again on the next heartbeat; direct-mode nodes are never
// touched; every transition carries the term.
func TestTrackerTransitions(t *testing.T) {
	ctx := context.Background()
	tr, m, clk := newTracker(t)
	tr.Enable(7)
	tr.Beat(ctx, "a1")
	tr.Beat(ctx, "a2")
	clk.Advance(ttl / 2)
	tr.Beat(ctx, "a2")
	clk.Advance(ttl/2 + time.Second)
	tr.Sweep(ctx)
	if got := m.status("a1"); got != structs.NodeDown {
		t.Fatalf("a1 after TTL without heartbeat = %s, want down", got)
	}
	if got := m.status("a2"); got != structs.NodeReady {
		t.Fatalf("a2, which heartbeat, = %s", got)
	}
	if got := m.status("direct"); got != structs.NodeReady {
		t.Fatalf("direct-mode node = %s, want untouched", got)
	}
	tr.Beat(ctx, "a2")
	clk.Advance(time.Hour + time.Second)
	tr.Beat(ctx, "a2")
	tr.Sweep(ctx)
	if got := m.status("a1"); got != structs.NodeGone {
		t.Fatalf("a1 down for longer than node_gc_threshold = %s, want gone", got)
	}
	tr.Beat(ctx, "a1")
	if got := m.status("a1"); got != structs.NodeReady {
		t.Fatalf("a1 after a heartbeat = %s, want ready", got)
	}
	n := m.writeCount()
	tr.Beat(ctx, "a1")
	tr.Sweep(ctx)
	if m.writeCount() != n {
		t.Fatal("a heartbeat of a ready node, or a sweep with nothing due, wrote to the log")
	}
	for _, w := range m.writes {
		if w.Term != 7 {
			t.Fatalf("transition %+v not written under the tracker's term", w)
		}
	}
}

// A leader that has just stepped up gives every node TTL plus the grace
// before it may mark one down: heartbeats went to the old leader.
func TestTrackerStepUpGrace(t *testing.T) {
	ctx := context.Background()
	tr, m, clk := newTracker(t)
	tr.Enable(3)
	clk.Advance(ttl + time.Second)
	tr.Sweep(ctx)
	if m.writeCount() != 0 {
		t.Fatalf("marked %d node(s) down within the step-up grace", m.writeCount())
	}
	clk.Advance(ttl)
	tr.Sweep(ctx)
	if m.status("a1") != structs.NodeDown || m.status("a2") != structs.NodeDown {
		t.Fatal("nodes silent past TTL plus grace are not down")
	}
	// Disabled (step-down): nothing is decided any more.
	tr.Disable()
	tr.Beat(ctx, "a1")
	tr.Sweep(ctx)
	if m.status("a1") != structs.NodeDown {
		t.Fatal("a disabled tracker wrote a transition")
	}
}
