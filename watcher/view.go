package watcher

import (
	"fmt"
	"slices"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
)

// ModuleViews are the requests the watcher would hand a volume's modules
// now (`volhost module record`): built by the same code from the
// same reads as a release pass, so a recorded view replays exactly.
type ModuleViews struct {
	// Policy is the release policy's request; nil when the volume has no
	// claim to judge.
	Policy *abi.PolicyRequest
	// Adapter is the adapter's request for one claim at one step; nil
	// unless a step was asked for.
	Adapter *abi.AdapterRequest
}

// ViewOf reads volume ref from st and builds its module views as of now.
// step "" (or StepPolicy) asks for the policy view; a CSI step for the
// adapter's view of claim allocID ("" picks the first claim by allocation
// ID). A missing volume or claim is a structs.ErrNotFound.
func ViewOf(st StateReader, ref structs.VolumeRef, step, allocID string, now time.Time) (*ModuleViews, error) {
	p, err := readPass(st, ref, now)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, structs.NotFound("volume", ref.Namespace+"/"+ref.ID)
	}
	if step == "" || step == StepPolicy {
		if len(p.claims) == 0 {
			return nil, structs.Conflict("volume %q has no claim to judge: a policy is asked only about claims", ref.Namespace+"/"+ref.ID)
		}
		return &ModuleViews{Policy: p.policyRequest()}, nil
	}
	if !slices.Contains(abi.AdapterSteps, step) {
		return nil, &structs.ValidationError{Field: "step", Msg: fmt.Sprintf("must be one of %s, %s, got %q", StepPolicy, structs.Choices(abi.AdapterSteps...), step)}
	}
	claims := p.sortedClaims()
	var c *structs.Claim
	for _, cl := range claims {
		if allocID == "" || cl.AllocID == allocID {
			c = cl
			break
		}
	}
	if c == nil {
		if allocID == "" {
			return nil, structs.Conflict("volume %q has no claim: an adapter is asked about a claim", ref.Namespace+"/"+ref.ID)
		}
		return nil, structs.NotFound("claim", allocID)
	}
	return &ModuleViews{Adapter: p.subject(c).Request(step)}, nil
}
