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

// Index finds a request's allocations and nodes by ID. Small requests (the
// usual case) are searched linearly; maps are built only above
// indexThreshold items, because every allocation costs in a wasm guest.
type Index struct {
	allocs   []abi.AllocView
	nodes    []abi.NodeView
	allocMap map[string]*abi.AllocView
	nodeMap  map[string]*abi.NodeView
}

const indexThreshold = 32

// NewIndex indexes req's allocations and nodes. For duplicate IDs the last wins.
func NewIndex(req *abi.PolicyRequest) Index {
	ix := Index{allocs: req.Allocs, nodes: req.Nodes}
	if len(req.Allocs) > indexThreshold {
		ix.allocMap = make(map[string]*abi.AllocView, len(req.Allocs))
		for i := range req.Allocs {
			ix.allocMap[req.Allocs[i].ID] = &req.Allocs[i]
		}
	}
	if len(req.Nodes) > indexThreshold {
		ix.nodeMap = make(map[string]*abi.NodeView, len(req.Nodes))
		for i := range req.Nodes {
			ix.nodeMap[req.Nodes[i].ID] = &req.Nodes[i]
		}
	}
	return ix
}

// Alloc returns the allocation with the given ID, or nil.
func (ix Index) Alloc(id string) *abi.AllocView {
	if ix.allocMap != nil {
		return ix.allocMap[id]
	}
	for i := len(ix.allocs) - 1; i >= 0; i-- {
		if ix.allocs[i].ID == id {
			return &ix.allocs[i]
		}
	}
	return nil
}

// Node returns the node with the given ID, or nil.
func (ix Index) Node(id string) *abi.NodeView {
	if ix.nodeMap != nil {
		return ix.nodeMap[id]
	}
	for i := len(ix.nodes) - 1; i >= 0; i-- {
		if ix.nodes[i].ID == id {
			return &ix.nodes[i]
		}
	}
	return nil
}

// AllocStatus is the claim's allocation status: AllocGone when the request
// does not carry the allocation, "unknown" when it carries no status.
func (ix Index) AllocStatus(c *abi.ClaimView) string {
	a := ix.Alloc(c.AllocID)
	switch {
	case a == nil:
		return AllocGone
	case a.ClientStatus == "":
		return "unknown"
	}
	return a.ClientStatus
}

// NodeStatus is the claim's node status, NodeGone when the request does not
// carry the node.
func (ix Index) NodeStatus(c *abi.ClaimView) string {
	if n := ix.Node(c.NodeID); n != nil {
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
		return abi.Decision{AllocID: c.AllocID, Action: abi.ActionWait, Reason: allocReason(status)}
	}
	if c.State == ClaimTaken {
		switch node := ix.NodeStatus(c); node {
		case NodeDown, NodeGone:
			return abi.Decision{AllocID: c.AllocID, Action: abi.ActionReleaseSkipNode, Reason: skipReason(status, node)}
		}
	}
	return abi.Decision{AllocID: c.AllocID, Action: abi.ActionRelease, Reason: allocReason(status)}
}

// allocReason is "allocation <status>", constant for the known statuses so
// the common case does not allocate.
func allocReason(status string) string {
	switch status {
	case AllocPending:
		return "allocation pending"
	case AllocRunning:
		return "allocation running"
	case AllocComplete:
		return "allocation complete"
	case AllocFailed:
		return "allocation failed"
	case AllocLost:
		return "allocation lost"
	case AllocGone:
		return "allocation gone"
	}
	return "allocation " + status
}

// skipReason explains a release that skips the node step.
func skipReason(status, node string) string {
	if node == NodeDown {
		switch status {
		case AllocComplete:
			return "allocation complete, node down: skip node step"
		case AllocFailed:
			return "allocation failed, node down: skip node step"
		case AllocLost:
			return "allocation lost, node down: skip node step"
		}
	}
	return allocReason(status) + ", node " + node + ": skip node step"
}
