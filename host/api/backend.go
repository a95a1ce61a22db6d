package api

import (
	"context"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// Backend performs every write and operation the API exposes. The lead
// implements it in host/server: each method validates before anything is
// written to the replicated log (hashicorp/nomad#27324), so a refusal is an error
// here and never a committed entry.
//
// Errors are mapped to HTTP statuses by type, never by message:
// structs.ErrNotFound 404, structs.ErrConflict 409, structs.ErrNoLeader 503,
// *structs.ValidationError 400, an error carrying a gRPC status 502 (the CSI
// plugin answered with an error) and anything else 500.
type Backend interface {
	// RegisterPlugin probes the controller endpoint and registers the plugin.
	RegisterPlugin(ctx context.Context, p *structs.Plugin) (*structs.Plugin, error)
	// RegisterNode probes the node plugin endpoints and registers the node.
	RegisterNode(ctx context.Context, n *structs.Node) (*structs.Node, error)
	// UpdateNodeStatus sets a node ready or down.
	UpdateNodeStatus(ctx context.Context, id string, status structs.NodeStatus) (uint64, error)
	// FenceNode records an operator's attestation that a node is off
	// (reason required); UnfenceNode lifts it. accessor names the token.
	FenceNode(ctx context.Context, id, reason, accessor string) (uint64, error)
	UnfenceNode(ctx context.Context, id, accessor string) (uint64, error)
	// DeregisterNode removes a node: refused while an allocation on it
	// runs, and while claims are on it unless force; answers the claims
	// whose node steps will then be skipped.
	DeregisterNode(ctx context.Context, id string, force bool) ([]structs.NodeClaim, uint64, error)
	// DeregisterPlugin removes a plugin no volume uses.
	DeregisterPlugin(ctx context.Context, id string) (uint64, error)
	// RegisterVolumes registers (or updates) volumes.
	RegisterVolumes(ctx context.Context, vols []*structs.Volume) (uint64, error)
	// DeregisterVolume removes a volume; with force it drops the claims
	// without CSI calls and answers with the leftover attachments.
	DeregisterVolume(ctx context.Context, ns, id string, force bool) ([]*structs.Leftover, uint64, error)
	// ClaimVolume publishes a volume for an allocation and records the claim.
	ClaimVolume(ctx context.Context, req *structs.ClaimRequest) (*structs.Claim, error)
	// DetachVolume runs the release steps for a node's releasable claims now.
	DetachVolume(ctx context.Context, ns, id, nodeID string) (*structs.DetachResult, error)
	// UpsertAllocs registers allocations or updates their client status.
	UpsertAllocs(ctx context.Context, allocs []*structs.Alloc) (uint64, error)
	// ClearLeftovers forgets leftovers by ID, or all of them.
	ClearLeftovers(ctx context.Context, ids []string, all bool) (uint64, error)
	// SystemGC writes the GC claim for every volume with claims to release
	// and answers how many volumes it touched.
	SystemGC(ctx context.Context) (int, error)
	// Leader reports the current leader's address and whether this server is it.
	Leader() (address string, isLeader bool)
}

// Reader is the read side of a state snapshot. *state.Snapshot satisfies it.
// ws may be nil; a missing object is (nil, nil).
type Reader interface {
	// Generation identifies the database read (state.Snapshot.Generation).
	Generation() <-chan struct{}
	// VolumesFrom walks the volumes in (namespace, ID) order from the
	// first at or after (namespace, id); next returns nil after the last.
	// A list page costs its own size, not the table's (BenchmarkScale).
	VolumesFrom(ws memdb.WatchSet, namespace, id string) (next func() *structs.Volume, err error)
	VolumeByID(ws memdb.WatchSet, ns, id string) (*structs.Volume, error)
	Allocs(ws memdb.WatchSet) ([]*structs.Alloc, error)
	AllocByID(ws memdb.WatchSet, id string) (*structs.Alloc, error)
	Nodes(ws memdb.WatchSet) ([]*structs.Node, error)
	NodeByID(ws memdb.WatchSet, id string) (*structs.Node, error)
	Plugins(ws memdb.WatchSet) ([]*structs.Plugin, error)
	PluginByID(ws memdb.WatchSet, id string) (*structs.Plugin, error)
	Events(ws memdb.WatchSet, sinceIndex uint64) ([]*structs.Event, error)
	// EventsFiltered reads one page of events (host/state/events.go).
	EventsFiltered(ws memdb.WatchSet, f state.EventFilter) ([]state.EventEntry, uint64, error)
	Leftovers(ws memdb.WatchSet) ([]*structs.Leftover, error)
	Index(table string) (uint64, error)
	// VolumeStatsWatch, StuckVolumes (and StuckVolumesFrom) and
	// ClaimCountsByNode read what the store keeps in step with every write
	// (host/state/stats.go): GET /v1/stats and the stuck filter of the
	// volume list read them instead of every volume (BenchmarkScale).
	VolumeStatsWatch(ws memdb.WatchSet) (state.VolumeStats, error)
	StuckVolumes(ws memdb.WatchSet) ([]*structs.Volume, error)
	StuckVolumesFrom(ws memdb.WatchSet, namespace, id string) (next func() *structs.Volume, err error)
	// ClaimedVolumesFrom walks only the volumes with a claim (the list's
	// ?claim_state= filter), as VolumesFrom walks them all.
	ClaimedVolumesFrom(ws memdb.WatchSet, namespace, id string) (next func() *structs.Volume, err error)
	ClaimCountsByNode(ws memdb.WatchSet) (map[string]int, error)
}

// QueryFn reads from a snapshot, adds what it read to ws and returns the
// index the answer reflects.
type QueryFn func(ws memdb.WatchSet, r Reader) (uint64, error)

// Store runs blocking queries: fn runs on a fresh snapshot and is re-run
// when something it watched changes, until the index it returns exceeds
// minIndex, maxWait passes or ctx ends. minIndex 0 runs fn once.
type Store interface {
	Query(ctx context.Context, minIndex uint64, maxWait time.Duration, fn QueryFn) (uint64, error)
}
