// Package scheduler is the contract between volhost and a scheduler that
// feeds it nodes and allocations with their lifecycle: a Source (the Nomad
// bridge in host/scheduler/nomad; a Kubernetes source of Pods and Nodes
// would be a sibling package) runs on the leader only, like the watcher,
// and writes through the server's validated, term-fenced writes (Writer)
// like the API does. The watcher never learns which scheduler fed it: it
// sees allocations turn terminal and nodes change status, nothing else.
package scheduler

import (
	"context"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// Source mirrors one scheduler into volhost.
type Source interface {
	// Name is the source's name, the Source of the allocations it
	// mirrors and the key of its cursor ("nomad").
	Name() string
	// Run mirrors the scheduler until ctx ends (leadership lost or the
	// agent stopping). Every write carries term, the leadership term this
	// server leads in, so a deposed leader's source writes nothing (FSM
	// term fence). Run keeps going through the scheduler's faults: it
	// returns only when ctx ends.
	Run(ctx context.Context, term uint64) error
	// Status is the source's state for `volhost scheduler status`.
	Status() Status
}

// Writer is what a source writes through: host/server's writes, each
// validated against committed state before it reaches the log.
type Writer interface {
	// SchedulerSync commits a batch of the source's allocations, events
	// and cursor in one entry.
	SchedulerSync(ctx context.Context, req *structs.SchedulerSyncRequest) (uint64, error)
	// NodeLiveness commits a node's status change the scheduler reported
	// (down: node steps are held until a fence, as for lost heartbeats).
	NodeLiveness(ctx context.Context, req *structs.NodeLivenessRequest) error
	// ClaimVolume claims and publishes a volume for an allocation.
	ClaimVolume(ctx context.Context, req *structs.ClaimRequest) (*structs.Claim, error)
}

// Connection states of a source.
const (
	StateStopped    = "stopped"    // this server does not lead: the leader runs the source
	StateConnecting = "connecting" // listing the scheduler's nodes and allocations
	StateStreaming  = "streaming"  // following the scheduler's event stream
	StateRetrying   = "retrying"   // the scheduler failed; retrying after a backoff
)

// Status is a source's state, as `volhost scheduler status` and
// GET /v1/scheduler/status show it.
type Status struct {
	Source  string `json:"source"`
	Address string `json:"address"`
	State   string `json:"state"`
	// Index is the scheduler index of the last change committed (the
	// cursor in volhost's state, which a new leader resumes from).
	Index uint64 `json:"index"`
	// Resets counts the scheduler's index going backwards (its state
	// was lost), each answered by a full re-list.
	Resets    int       `json:"resets"`
	LastList  time.Time `json:"last_list,omitzero"`
	LastEvent time.Time `json:"last_event,omitzero"`
	Nodes     int       `json:"nodes"`  // scheduler nodes known
	Allocs    int       `json:"allocs"` // allocations mirrored (those that declare volhost volumes)
	Live      int       `json:"live"`
	Terminal  int       `json:"terminal"`
	Held      int       `json:"held"`   // lost allocations held until their node is fenced or gone
	Claims    int       `json:"claims"` // claims the source made since it started leading
	LastError string    `json:"last_error,omitempty"`
	// Failures counts the attempts that failed since the source was
	// last connected (one event per distinct cause, not per attempt).
	Failures   int       `json:"failures"`
	ErrorTime  time.Time `json:"error_time,omitzero"`
	Problems   []Problem `json:"problems,omitempty"`
	StartTime  time.Time `json:"start_time,omitzero"`
	LeaderTerm uint64    `json:"leader_term,omitempty"`
}

// Problem is one thing the source could not mirror or claim (bad input:
// an unknown volume, a volume already claimed for writing, a node volhost
// does not know), kept while it lasts; each was also recorded once as an
// event.
type Problem struct {
	Key     string    `json:"key"` // what it is about: "alloc/ID", "alloc/ID/volume/NS/VOL", "node/NAME"
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
}
