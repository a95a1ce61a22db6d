package attach

import (
	"context"
	"errors"
	"fmt"
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
// answer to what the host can verify (CheckIDs). A failed call, a guest
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
	if err := CheckIDs(step, s.Volume, s.Claim, s.Node, resp); err != nil {
		return nil, Fault(a, StepAdapter, FaultUnsafe, "%v", err)
	}
	return resp, nil
}

// CheckIDs bounds an adapter's answer to what the host can verify:
// the volume ID must be the volume's external ID, and
// a node ID must be the one the claim's steps go to. A module that names
// another disk or another instance would otherwise detach it from under
// someone else.
//
// At release that is the ID recorded on the claim when it was published,
// and only that one (structs.Claim.ReleaseNodeID): the node's current ID
// may name another machine (a replaced instance, an agent that reported
// another node's ID), whose ControllerUnpublish would detach a disk under
// its workload or answer OK for an attachment it never had. A claim that
// recorded none (published before the field existed, or while its node
// had no node endpoint) is held to the node's current one. At publish,
// the node's current ID; when the host knows none, the adapter's is the
// only one there is (it is recorded on the claim and every later step is
// held to it). node may be nil (gone).
func CheckIDs(step string, v *structs.Volume, c *structs.Claim, node *structs.Node, resp *abi.AdapterResponse) error {
	if resp.VolumeID != v.ExternalID {
		return fmt.Errorf("answered volume ID %q for %s of volume %s/%s, whose external ID is %q",
			resp.VolumeID, step, v.Namespace, v.ID, v.ExternalID)
	}
	if step != abi.StepControllerPublish && step != abi.StepControllerUnpublish {
		return nil // node steps send no node ID
	}
	var current string
	if node != nil {
		if np := node.Plugins[v.PluginID]; np != nil {
			current = np.ExternalNodeID
		}
	}
	known := current
	if step != abi.StepControllerPublish {
		known = c.ReleaseNodeID(current)
	}
	switch {
	case resp.NodeID == "":
		return nil // refused later, with the host's own message
	case known == "" && step == abi.StepControllerPublish:
		return nil
	case resp.NodeID == known:
		return nil
	case known == "":
		return fmt.Errorf("answered node ID %q for %s of node %q, for which the host knows no external node ID to check it against",
			resp.NodeID, step, c.NodeID)
	case step != abi.StepControllerPublish && c.ExternalNodeID != "":
		return fmt.Errorf("answered node ID %q for %s of node %q, whose external node ID is %q (recorded on the claim at publish)",
			resp.NodeID, step, c.NodeID, known)
	}
	return fmt.Errorf("answered node ID %q for %s of node %q, whose external node ID is %q",
		resp.NodeID, step, c.NodeID, known)
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
