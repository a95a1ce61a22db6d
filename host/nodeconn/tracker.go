package nodeconn

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
)

// Defaults of the heartbeat settings (server node_rpc block). The TTL is
// Nomad's heartbeat grace order of magnitude; gone after a day down like
// Nomad's node_gc_threshold.
const (
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultHeartbeatTTL      = 30 * time.Second
	DefaultNodeGCThreshold   = 24 * time.Hour
)

// Nodes reads the nodes the tracker watches (the state store).
type Nodes interface {
	Nodes() ([]*structs.Node, error)
	Node(id string) (*structs.Node, error)
}

// LivenessWriter commits a heartbeat transition through the replicated log.
type LivenessWriter interface {
	NodeLiveness(ctx context.Context, req *structs.NodeLivenessRequest) error
}

// TrackerConfig tunes a Tracker.
type TrackerConfig struct {
	TTL         time.Duration // down after this long without a heartbeat
	GCThreshold time.Duration // gone after this long down
	// Grace is what a leader that just stepped up gives every node before
	// it may mark one down (default TTL): heartbeats went to the old
	// leader, so their absence here says nothing yet.
	Grace  time.Duration
	Clock  clockwork.Clock
	Logger hclog.Logger
}

// Tracker is the leader's heartbeat bookkeeping: last heartbeats live in
// memory (a heartbeat is never a log write); only transitions are
// committed, with the term they were decided in, so a deposed leader's
// tracker writes nothing (FSM term fence).
type Tracker struct {
	cfg    TrackerConfig
	nodes  Nodes
	writer LivenessWriter
	log    hclog.Logger

	mu        sync.Mutex
	term      uint64 // 0: not leading
	enabledAt time.Time
	last      map[string]time.Time
}

// NewTracker returns a disabled tracker.
func NewTracker(cfg TrackerConfig, nodes Nodes, w LivenessWriter) *Tracker {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultHeartbeatTTL
	}
	if cfg.GCThreshold <= 0 {
		cfg.GCThreshold = DefaultNodeGCThreshold
	}
	if cfg.Grace <= 0 {
		cfg.Grace = cfg.TTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Tracker{cfg: cfg, nodes: nodes, writer: w, log: cfg.Logger.Named("heartbeat"), last: map[string]time.Time{}}
}

// Enable starts tracking for leadership term; every node's clock starts
// now plus the step-up grace. Disable (term 0) forgets everything.
func (t *Tracker) Enable(term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.term = term
	t.enabledAt = t.cfg.Clock.Now()
	t.last = map[string]time.Time{}
}

// Disable stops tracking (step-down).
func (t *Tracker) Disable() { t.Enable(0) }

// Beat records a heartbeat of nodeID. A node whose heartbeat was lost is
// marked ready again at once (one write, on the transition only).
func (t *Tracker) Beat(ctx context.Context, nodeID string) {
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	term := t.term
	if term != 0 {
		t.last[nodeID] = now
	}
	t.mu.Unlock()
	if term == 0 {
		return
	}
	n, err := t.nodes.Node(nodeID)
	if err != nil || n == nil || !n.HeartbeatLost {
		return
	}
	t.transition(ctx, term, n, structs.NodeReady, "heartbeating again", now)
}

// Run sweeps every TTL/4 until ctx ends.
func (t *Tracker) Run(ctx context.Context) {
	tick := t.cfg.Clock.NewTicker(max(t.cfg.TTL/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
			t.Sweep(ctx)
		}
	}
}

// Sweep marks down the agent nodes whose last heartbeat (or the step-up,
// plus the grace, when none came yet) is older than the TTL, and gone the
// ones down for longer than the GC threshold. A timeout only ever changes
// the status: it never fences (RATIONALE "Safety").
func (t *Tracker) Sweep(ctx context.Context) {
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	term, enabledAt := t.term, t.enabledAt
	last := make(map[string]time.Time, len(t.last))
	for k, v := range t.last {
		last[k] = v
	}
	t.mu.Unlock()
	if term == 0 {
		return
	}
	nodes, err := t.nodes.Nodes()
	if err != nil {
		t.log.Error("read nodes", "error", err)
		return
	}
	for _, n := range nodes {
		if !n.Agent {
			continue // direct mode: its status is the operator's
		}
		switch {
		case n.Status == structs.NodeReady:
			seen, ok := last[n.ID]
			deadline := seen.Add(t.cfg.TTL)
			if !ok {
				seen, deadline = enabledAt, enabledAt.Add(t.cfg.TTL+t.cfg.Grace)
			}
			if now.After(deadline) {
				t.transition(ctx, term, n, structs.NodeDown,
					fmt.Sprintf("no heartbeat for %s (heartbeat_ttl %s)", now.Sub(seen).Round(time.Second), t.cfg.TTL), now)
			}
		case n.Status == structs.NodeDown && n.HeartbeatLost:
			if now.Sub(n.StatusSince) > t.cfg.GCThreshold {
				t.transition(ctx, term, n, structs.NodeGone,
					fmt.Sprintf("down for longer than node_gc_threshold %s", t.cfg.GCThreshold), now)
			}
		}
	}
}

func (t *Tracker) transition(ctx context.Context, term uint64, n *structs.Node, to structs.NodeStatus, reason string, now time.Time) {
	lost := n.HeartbeatLost
	err := t.writer.NodeLiveness(ctx, &structs.NodeLivenessRequest{
		NodeID: n.ID, From: n.Status, FromHeartbeatLost: &lost, Status: to, Reason: reason, Time: now, Term: term,
	})
	if err != nil {
		// A conflict is a heartbeat or an operator racing us: the next
		// sweep decides again from what is committed.
		t.log.Debug("node transition not written", "node", n.ID, "to", to, "error", err)
		return
	}
	t.log.Warn("node status changed by heartbeat", "node", n.ID, "from", n.Status, "to", to, "reason", reason)
}
