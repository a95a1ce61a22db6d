// Package defaultpolicy owns the default release policy's decisions as a pure
// function over the ABI messages. The default-policy example module is this
// function behind the guest SDK, and the host's native default may call it
// too, so the Wasm and native defaults cannot drift (DESIGN "Wasm modules":
// differential test over a corpus).
//
// For each claim of the request:
//   - its allocation is pending or running (or reports a status this
//     version does not know): wait, RetryAfterMs 0 (the host's backoff
//     decides), reason "allocation <status>". Never release a claim whose
//     workload may still be using the volume.
//   - its allocation is terminal (complete, failed, lost) or gone (status
//     "gone" or absent from the request): release. When the claim has not
//     passed the node step yet (state "taken") and its node is down or gone
//     (status "down"/"gone" or absent), release skipping the node step: the
//     node cannot answer NodeUnpublish, and waiting for it is what leaves
//     claims on dead nodes never freed (ANCHORS pain 1).
package defaultpolicy

import "github.com/volhost/volhost/abi"

// Allocation client statuses and node statuses as the views carry them.
const (
	AllocPending  = "pending"
	AllocRunning  = "running"
	AllocComplete = "complete"
	AllocFailed   = "failed"
	AllocLost     = "lost"
	AllocGone     = "gone"

	NodeReady = "ready"
	NodeDown  = "down"
	NodeGone  = "gone"

	ClaimTaken = "taken"
)

// Index gives a request's allocations and nodes by ID.
type Index struct {
	Allocs map[string]*abi.AllocView
	Nodes  map[string]*abi.NodeView
}

// NewIndex indexes req's allocations and nodes. Later duplicates win.
func NewIndex(req *abi.PolicyRequest) Index {
	ix := Index{
		Allocs: make(map[string]*abi.AllocView, len(req.Allocs)),
		Nodes:  make(map[string]*abi.NodeView, len(req.Nodes)),
	}
	for i := range req.Allocs {
		ix.Allocs[req.Allocs[i].ID] = &req.Allocs[i]
	}
	for i := range req.Nodes {
		ix.Nodes[req.Nodes[i].ID] = &req.Nodes[i]
	}
	return ix
}

// AllocStatus is the claim's allocation status, AllocGone when the request
// does not carry the allocation.
func (ix Index) AllocStatus(c *abi.ClaimView) string {
	if a, ok := ix.Allocs[c.AllocID]; ok && a.ClientStatus != "" {
		return a.ClientStatus
	}
	if _, ok := ix.Allocs[c.AllocID]; ok {
		return "unknown"
	}
	return AllocGone
}

// NodeStatus is the claim's node status, NodeGone when the request does not
// carry the node.
func (ix Index) NodeStatus(c *abi.ClaimView) string {
	if n, ok := ix.Nodes[c.NodeID]; ok {
		return n.Status
	}
	return NodeGone
}

// Terminal reports whether an allocation status means its workload no longer
// runs, so its claims may be released.
func Terminal(status string) bool {
	switch status {
	case AllocComplete, AllocFailed, AllocLost, AllocGone:
		return true
	}
	return false
}

// Decide is the default policy: one decision per claim, in claim order.
func Decide(req *abi.PolicyRequest) *abi.PolicyResponse {
	ix := NewIndex(req)
	resp := &abi.PolicyResponse{Decisions: make([]abi.Decision, 0, len(req.Claims))}
	for i := range req.Claims {
		resp.Decisions = append(resp.Decisions, ix.DecideClaim(&req.Claims[i]))
	}
	return resp
}

// DecideClaim is the default decision for one claim.
func (ix Index) DecideClaim(c *abi.ClaimView) abi.Decision {
	status := ix.AllocStatus(c)
	if !Terminal(status) {
		return abi.Decision{AllocID: c.AllocID, Action: abi.ActionWait, Reason: "allocation " + status}
	}
	if c.State == ClaimTaken {
		switch node := ix.NodeStatus(c); node {
		case NodeDown, NodeGone:
			return abi.Decision{AllocID: c.AllocID, Action: abi.ActionReleaseSkipNode,
				Reason: "allocation " + status + ", node " + node + ": skip node step"}
		}
	}
	return abi.Decision{AllocID: c.AllocID, Action: abi.ActionRelease, Reason: "allocation " + status}
}
