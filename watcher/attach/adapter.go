package attach

import (
	"context"
	"errors"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
)

// Adapter maps claims onto a driver's CSI requests and classifies its errors.
// The native spec adapter (watcher.SpecAdapter) and csi-adapter Wasm
// modules implement it.
type Adapter interface {
	AdaptRequest(ctx context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error)
	ClassifyError(ctx context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error)
}

// Adapters picks the adapter that serves a volume: the claim path's view
// of the module registry (watcher.Modules, which picks policies too).
type Adapters interface {
	AdapterFor(v *structs.Volume) Adapter
}

// Subject is what one claim step is about: claim Claim of Volume on Node
// through Plugin, as of Now. Node is nil when the node is gone, Plugin
// when it is not registered. At release, Node is the node the claim's
// steps go to (the watcher's stepNode).
type Subject struct {
	Volume *structs.Volume
	Claim  *structs.Claim
	Node   *structs.Node
	Plugin *structs.Plugin
	Now    time.Time
}

// Request is the adapter's view of the subject at step: the same for the
// claim path's ControllerPublish as for the release's steps, and for
// `volhost module record`.
func (s Subject) Request(step string) *abi.AdapterRequest {
	return &abi.AdapterRequest{
		Step:      step,
		Claim:     ClaimView(s.Claim),
		Volume:    VolumeView(s.Volume),
		Node:      NodeView(s.Volume.PluginID, s.Claim.NodeID, s.Node, s.Now, true),
		Plugin:    PluginView(s.Volume.PluginID, s.Plugin, s.Node),
		NowUnixMs: s.Now.UnixMilli(),
	}
}

// Adapt asks adapter a for the fields of step's request and bounds its
// answer to what the host can verify (abi.CheckAdapterIDs, checked
// against a request built afresh: the adapter cannot move the bounds). A failed call, a guest
// error, no answer or no volume ID is the module's fault (ModuleError);
// IDs the host cannot verify are an unsafe fault. The claim path refuses
// the claim with that fault and the release records it on the claim:
// the same ClaimError either way.
func (s Subject) Adapt(ctx context.Context, a Adapter, step string) (*abi.AdapterResponse, *structs.ClaimError) {
	resp, err := a.AdaptRequest(ctx, s.Request(step))
	if err == nil && resp == nil {
		err = errors.New("adapter returned no response")
	}
	if err == nil && resp.Error != "" {
		err = GuestError(resp.Error)
	}
	if err == nil && resp.VolumeID == "" {
		err = BadOutput("empty volume ID")
	}
	if err != nil {
		return nil, ModuleError(a, StepAdapter, err)
	}
	if err := abi.CheckAdapterIDs(s.Request(step), resp); err != nil {
		return nil, Fault(a, StepAdapter, FaultUnsafe, "%v", err)
	}
	return resp, nil
}

// Secrets is what a CSI call of volume v's claims sends as secrets, from
// the keys adapter a answered: the rule is structs.Volume.SelectSecrets
// (nil keys: all of the volume's secrets), and a key the volume lacks is
// a's bad-output fault. One behaviour in both directions: the claim path
// refuses the claim with this fault before any CSI call, the release
// records it on the claim (retried with backoff) before its
// ControllerUnpublish. Neither sends the call without the secret: a
// module that names a secret the volume lacks is wrong about the volume,
// and a publish without it would only move the failure into the driver,
// or into a release that cannot run later.
func Secrets(a Adapter, v *structs.Volume, keys []string) (map[string]string, *structs.ClaimError) {
	out, err := v.SelectSecrets(keys)
	if err != nil {
		return nil, Fault(a, StepAdapter, FaultBadOutput, "%v", err)
	}
	return out, nil
}
