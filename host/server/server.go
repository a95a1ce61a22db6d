// Package server implements volhost's operations on top of the state store,
// the replicated log and the CSI clients: every write is validated against a
// snapshot before it reaches the log (a refusal is never committed, unlike the
// reference system: hashicorp/nomad#27324), CSI probes and the claim path's publish
// calls happen here, and the leader-only work is handed to the watcher.
package server

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// Log is the replicated log the server writes through (host/cluster). Its
// Apply validates a request against a snapshot before appending it (a
// refusal is never committed) and the store validates again inside the
// applying transaction, so two racing writers cannot commit an invalid state.
type Log interface {
	Apply(ctx context.Context, t structs.MessageType, req any) (uint64, any, error)
	IsLeader() bool
	Leader() (addr, id string)
	// ReadyTerm is the term the claim path runs under; ConfirmLeader
	// fences each of its CSI calls by that term (attach.Call), as the
	// watcher's are.
	ReadyTerm() uint64
	attach.Leader
	// WaitForLeader blocks until this server's step-up is complete.
	WaitForLeader(ctx context.Context) error
}

// Leader-only operations the watcher performs for operator commands.
type releaser interface {
	Detach(ctx context.Context, namespace, volumeID, nodeID string) (*structs.DetachResult, error)
	GC(ctx context.Context) (int, error)
}

// Server is the host's Backend for the HTTP API.
type Server struct {
	store   *state.Store
	log     Log
	csi     *csi.Client
	node    attach.NodeSteps
	agents  attach.NodeAgents
	modules attach.Adapters
	ready   func(ctx context.Context) error
	release releaser
	clock   clockwork.Clock
	logger  hclog.Logger

	// locks serialise claims per volume on this server, so two claims
	// racing for a single-writer volume cannot both publish before one of
	// them is refused by the log (and the loser's rollback cannot unpublish
	// the winner's attachment), and with the watcher's per-node release
	// steps, so a release never unstages or detaches under a claim being
	// made.
	locks *attach.VolumeLocks
}

// Config wires a Server.
type Config struct {
	Store *state.Store
	Log   Log
	CSI   *csi.Client
	// Node runs node steps in direct mode; nil calls CSI as it is (no
	// directory work: tests whose nodes have no real root_dir).
	Node attach.NodeSteps
	// Agents routes the node steps of nodes registered by a node agent;
	// nil: none is ever connected.
	Agents attach.NodeAgents
	// Modules serves the volumes' adapters (the watcher's Modules).
	Modules attach.Adapters
	// Ready, if set, is asked before a claim takes its volume's lock or
	// writes anything: the agent's modules are loaded (an error refuses
	// the claim, nothing done).
	Ready  func(ctx context.Context) error
	Clock  clockwork.Clock
	Logger hclog.Logger
	// Locks is shared with the watcher (nil: the server's own).
	Locks *attach.VolumeLocks
}

// New returns a Server. SetReleaser must be called before Detach or SystemGC.
func New(cfg Config) *Server {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Locks == nil {
		cfg.Locks = attach.NewVolumeLocks()
	}
	if cfg.Node == nil && cfg.CSI != nil {
		cfg.Node = cfg.CSI
	}
	return &Server{
		locks:   cfg.Locks,
		store:   cfg.Store,
		log:     cfg.Log,
		csi:     cfg.CSI,
		node:    cfg.Node,
		agents:  cfg.Agents,
		modules: cfg.Modules,
		ready:   cfg.Ready,
		clock:   cfg.Clock,
		logger:  cfg.Logger.Named("server"),
	}
}

// SetReleaser gives the server the watcher that runs detach and GC.
func (s *Server) SetReleaser(r releaser) { s.release = r }

// Leader reports the leader's address and whether this server leads.
func (s *Server) Leader() (string, bool) {
	addr, _ := s.log.Leader()
	return addr, s.log.IsLeader()
}

func volumeKey(ns, id string) string { return fmt.Sprintf("%s/%s", ns, id) }
