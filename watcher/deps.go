package watcher

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// The watcher sees the state store, the replicated log and the CSI plugins
// only through these small interfaces, so it is tested without a server.
// Each is one job; the host's agent wires the real implementations.

// VolumeFeed is the blocking query the watcher loop sits on.
type VolumeFeed interface {
	// VolumesChangedSince blocks until the volumes table index exceeds index
	// (or ctx ends), then returns the volumes whose ModifyIndex > index and
	// the table's new index. index 0 returns every volume.
	VolumesChangedSince(ctx context.Context, index uint64) ([]*structs.Volume, uint64, error)
}

// StateReader reads current objects; a missing object is (nil, nil).
type StateReader interface {
	Volume(namespace, id string) (*structs.Volume, error)
	Alloc(id string) (*structs.Alloc, error)
	Node(id string) (*structs.Node, error)
	// NodeOfMachine is the node registered on machine m (the plugin and
	// the external node ID its driver reports), nil when none is.
	NodeOfMachine(m structs.Machine) (*structs.Node, error)
	Plugin(id string) (*structs.Plugin, error)
	// ReleasableVolumes lists volumes that have at least one claim whose
	// allocation is terminal or gone (what step-up and the claim GC visit).
	ReleasableVolumes() ([]structs.VolumeRef, error)
}

// ClaimWriter commits through the replicated log. Every call is one log entry.
type ClaimWriter interface {
	// CheckpointClaim writes the whole claim; at ready-to-free the store
	// removes it from the volume in the same entry.
	CheckpointClaim(ctx context.Context, req *structs.ClaimCheckpointRequest) (uint64, error)
	// MarkStuck marks (or, with a nil Stuck, clears) a volume as stuck.
	MarkStuck(ctx context.Context, req *structs.VolumeStuckRequest) (uint64, error)
	// GCClaims writes the empty GC claim that bumps the volumes' indexes.
	GCClaims(ctx context.Context, req *structs.ClaimGCRequest) (uint64, error)
	// ForceDeregister drops a volume and its claims (escape hatch), recording leftovers.
	ForceDeregister(ctx context.Context, req *structs.VolumeDeregisterRequest) ([]*structs.Leftover, error)
}

// Leadership is the fence of leader work (host/cluster): the watcher runs
// under the term its enable was reported for and confirms it before every
// CSI call, and stamps it on every checkpoint so the FSM refuses writes of
// an older term (the failover fence: exclusion between an old and a new
// leader must not rest on timing alone).
type Leadership interface {
	// ReadyTerm is the term this server leads in with its step-up
	// complete, 0 when it does not lead.
	ReadyTerm() uint64
	// ConfirmLeader precedes every CSI call (attach.Call).
	attach.Leader
}

// ControllerCSI is a CSI controller service reached at an endpoint.
type ControllerCSI interface {
	ControllerUnpublishVolume(ctx context.Context, endpoint string, req *csipb.ControllerUnpublishVolumeRequest) error
}

// Policy decides which claims of a volume may be released now. The native
// default and Wasm modules implement it; the watcher validates every answer.
type Policy interface {
	DecideRelease(ctx context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error)
}

// Modules picks the policy and adapter that serve a volume. The default
// returns the native implementations; the agent plugs Wasm modules in here
// (host/agent's module registry). The claim path sees only its adapters
// (attach.Adapters).
type Modules interface {
	PolicyFor(v *structs.Volume) Policy
	attach.Adapters
}
