// Package defaultpolicy owns the default release policy's decisions as a pure
// function over the ABI messages. The default-policy example module is this
// function behind the guest SDK, and the host's native default may call it
// too, so the Wasm and native defaults cannot drift (the differential test
// runs both over Corpus).
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
//     claims on dead nodes never freed (hashicorp/nomad#12346).
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
	// allocsDistinct: the allocation IDs are known to differ, so an
	// allocation with the claim's ID at the claim's own position is the
	// only one (Decide looks there first: the watcher lists one allocation
	// per claim, in claim order). It saves the backward scan, whose loop
	// iterations cost a guest as much as calls (ABI.md section 12).
	allocsDistinct bool
}

const indexThreshold = 32

// NewIndex indexes req's allocations and nodes. For duplicate IDs the last wins.
func NewIndex(req *abi.PolicyRequest) Index {
	var ix Index
	ix.init(req)
	return ix
}

// init is NewIndex into ix, which must be zero. The policy's own calls use
// it and the pointer methods below rather than Index values: in a Go wasm
// guest every copy of a struct over 16 bytes is a memory.copy or
// memory.fill, a call out of the guest's code into the host's memmove
// (Index is 72 bytes, a Decision 48), and an 8-claim decision made about
// 70 of them (TestGuestCallWork counts them).
func (ix *Index) init(req *abi.PolicyRequest) {
	ix.allocs, ix.nodes = req.Allocs, req.Nodes
	if len(req.Allocs)+len(req.Nodes) > 2 {
		ix.index(req)
	}
	// Else the usual one-claim request: nothing to index.
}

// index builds the maps of a large request, or for a small one finds
// whether its allocation IDs are distinct.
func (ix *Index) index(req *abi.PolicyRequest) {
	if len(req.Allocs) > indexThreshold {
		ix.allocMap = make(map[string]*abi.AllocView, len(req.Allocs))
		for i := range req.Allocs {
			ix.allocMap[req.Allocs[i].ID] = &req.Allocs[i]
		}
	} else {
		ix.allocsDistinct = distinctIDs(req.Allocs)
	}
	if len(req.Nodes) > indexThreshold {
		ix.nodeMap = make(map[string]*abi.NodeView, len(req.Nodes))
		for i := range req.Nodes {
			ix.nodeMap[req.Nodes[i].ID] = &req.Nodes[i]
		}
	}
}

// Alloc returns the allocation with the given ID, or nil.
func (ix Index) Alloc(id string) *abi.AllocView { return ix.alloc(id) }

func (ix *Index) alloc(id string) *abi.AllocView {
	if ix.allocMap != nil {
		return ix.allocMap[id]
	}
	for i := len(ix.allocs) - 1; i >= 0; i-- {
		if a := ix.allocs[i].ID; likelySameID(a, id) && equal(a, id) {
			return &ix.allocs[i]
		}
	}
	return nil
}

// distinctIDs reports whether the allocations' IDs certainly differ,
// judged by a 1024-bit set of hashes of their length and three of their
// bytes: one loop iteration per allocation, no string comparisons. A hash
// collision only means "not known", and lookups scan as usual.
func distinctIDs(allocs []abi.AllocView) bool {
	var seen [16]uint64
	for i := range allocs {
		id := allocs[i].ID
		if id == "" {
			return false
		}
		h := uint32(len(id)) ^ uint32(id[0])<<8 ^ uint32(id[len(id)/2])<<16 ^ uint32(id[len(id)-1])<<24
		h = (h * 0x9e3779b1) >> 22 // Fibonacci hashing to 10 bits
		if seen[h/64]&(1<<(h%64)) != 0 {
			return false
		}
		seen[h/64] |= 1 << (h % 64)
	}
	return true
}

// Node returns the node with the given ID, or nil.
func (ix Index) Node(id string) *abi.NodeView { return ix.node(id) }

func (ix *Index) node(id string) *abi.NodeView {
	if ix.nodeMap != nil {
		return ix.nodeMap[id]
	}
	for i := len(ix.nodes) - 1; i >= 0; i-- {
		if n := ix.nodes[i].ID; likelySameID(n, id) && equal(n, id) {
			return &ix.nodes[i]
		}
	}
	return nil
}

// likelySameID is the inline part of comparing two IDs: lengths and last
// bytes (the IDs of one request usually differ there, alloc-1 and alloc-2,
// or anywhere, UUIDs). Only a likely match calls equal (see equal for why
// not ==).
func likelySameID(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || a[len(a)-1] == b[len(a)-1])
}

// AllocStatus is the claim's allocation status: AllocGone when the request
// does not carry the allocation, "unknown" when it carries no status.
func (ix Index) AllocStatus(c *abi.ClaimView) string { return allocStatus(ix.Alloc(c.AllocID)) }

// NodeStatus is the claim's node status, NodeGone when the request does not
// carry the node.
func (ix Index) NodeStatus(c *abi.ClaimView) string { return nodeStatus(ix.Node(c.NodeID)) }

// allocStatus and nodeStatus are AllocStatus and NodeStatus of a looked-up
// view, small enough to be inlined into DecideClaim with the lookup (the
// methods are not: a call per claim in a wasm guest).
func allocStatus(a *abi.AllocView) string {
	switch {
	case a == nil:
		return AllocGone
	case a.ClientStatus == "":
		return "unknown"
	}
	return a.ClientStatus
}

func nodeStatus(n *abi.NodeView) string {
	if n == nil {
		return NodeGone
	}
	return n.Status
}

// Terminal reports whether an allocation status means its workload no longer
// runs, so its claims may be released.
func Terminal(status string) bool { return kindOf(status).terminal() }

// Decide is the default policy: one decision per claim, in claim order.
func Decide(req *abi.PolicyRequest) *abi.PolicyResponse {
	var resp *abi.PolicyResponse
	if len(req.Claims) == 1 {
		// The usual request: the response and its decision in one
		// allocation (each costs a wasm guest ~20 exits, ABI.md section 12).
		one := new(struct {
			resp abi.PolicyResponse
			d    [1]abi.Decision
		})
		resp = &one.resp
		resp.Decisions = one.d[:]
	} else {
		resp = &abi.PolicyResponse{Decisions: make([]abi.Decision, len(req.Claims))}
	}
	var ix Index
	ix.init(req)
	ix.decideAll(req.Claims, resp.Decisions)
	return resp
}

// DecideInto is Decide writing into resp, whose Decisions backing array is
// reused when large enough: a guest that keeps one response across calls
// (guest.HandleReleaseInto) then decides without allocating, and so without
// the GC work and yields allocation brings a Go guest. resp is
// overwritten; its decisions' AllocIDs are req's strings.
func DecideInto(req *abi.PolicyRequest, resp *abi.PolicyResponse) {
	decisions := resp.Decisions[:0]
	if cap(decisions) < len(req.Claims) {
		decisions = make([]abi.Decision, 0, len(req.Claims))
	}
	// Field by field, not a composite literal: that would be a
	// memory.fill and a memory.copy in a Go guest (see Index.init).
	resp.Decisions, resp.Error = decisions[:len(req.Claims)], ""
	var ix Index
	ix.init(req)
	ix.decideAll(req.Claims, resp.Decisions)
}

// decideAll writes the decision of each of claims into ds (one per claim,
// in claim order, as many as ds holds), overwriting every field. The
// decision is written out here rather than in a function per claim: in a
// Go wasm guest a call costs more than the decision (ABI.md section 12).
func (ix *Index) decideAll(claims []abi.ClaimView, ds []abi.Decision) {
	claims = claims[:len(ds)]
	for i := range claims {
		c := &claims[i]
		var a *abi.AllocView
		if ix.allocsDistinct && i < len(ix.allocs) && likelySameID(ix.allocs[i].ID, c.AllocID) && equal(ix.allocs[i].ID, c.AllocID) {
			a = &ix.allocs[i] // the usual request: no scan (see allocsDistinct)
		} else {
			a = ix.alloc(c.AllocID)
		}
		status := allocStatus(a)
		k := kindOf(status)
		action, reason := abi.ActionRelease, ""
		switch {
		case !k.terminal():
			action, reason = abi.ActionWait, k.reason(status)
		case c.State == ClaimTaken:
			if node := nodeStatus(ix.node(c.NodeID)); node == NodeDown || node == NodeGone {
				action, reason = abi.ActionReleaseSkipNode, k.skipReason(status, node)
				break
			}
			reason = k.reason(status)
		default:
			reason = k.reason(status)
		}
		d := &ds[i]
		d.AllocID, d.Action, d.RetryAfterMs, d.Reason = c.AllocID, action, 0, reason
	}
}

// DecideClaim is the default decision for one claim. It is decideAll's
// over that one claim: with the allocation IDs distinct the allocation at
// the claim's position is the only one with its ID, and otherwise the
// lookup scans, so the position does not change the answer.
func (ix Index) DecideClaim(c *abi.ClaimView) abi.Decision {
	var d [1]abi.Decision
	ix.decideAll([]abi.ClaimView{*c}, d[:])
	return d[0]
}

// allocKind is an allocation status classified once per claim, so the
// decision and its reason cost at most one string comparison (a call in a
// wasm guest) and no allocation for the known statuses.
type allocKind uint8

const (
	kindOther allocKind = iota // a status this version does not know
	kindPending
	kindRunning
	kindComplete
	kindFailed
	kindLost
	kindGone
)

// kindOf classifies status: its first byte picks the one candidate from a
// table, whose length and two 4-byte words (the first four bytes and the
// last four, overlapping for a 4-byte status) are then compared: no branch
// per candidate and no call to a string comparison, each a jump or a call
// in a Go wasm guest (ABI.md section 12).
func kindOf(status string) allocKind {
	if len(status) < 4 { // no known status is shorter
		return kindOther
	}
	k := kindByFirst[status[0]]
	w := &kindWords[k]
	if len(status) == int(w.n) && load32(status, 0) == w.first && load32(status, len(status)-4) == w.last {
		return k
	}
	return kindOther
}

// kindWord is what kindOf compares of a known status.
type kindWord struct {
	n           uint8 // the status's length; 0 for kindOther, which matches nothing
	first, last uint32
}

var (
	// kindByFirst is the only known status each first byte can start.
	kindByFirst = [256]allocKind{'p': kindPending, 'r': kindRunning, 'c': kindComplete, 'f': kindFailed, 'l': kindLost, 'g': kindGone}
	kindWords   = func() (w [kindGone + 1]kindWord) {
		for k, s := range map[allocKind]string{kindPending: AllocPending, kindRunning: AllocRunning, kindComplete: AllocComplete,
			kindFailed: AllocFailed, kindLost: AllocLost, kindGone: AllocGone} {
			w[k] = kindWord{n: uint8(len(s)), first: load32(s, 0), last: load32(s, len(s)-4)}
		}
		return w
	}()
)

func (k allocKind) terminal() bool { return k >= kindComplete }

var (
	// allocReasons is "allocation <status>" for the known statuses.
	allocReasons = [...]string{
		kindPending:  "allocation pending",
		kindRunning:  "allocation running",
		kindComplete: "allocation complete",
		kindFailed:   "allocation failed",
		kindLost:     "allocation lost",
		kindGone:     "allocation gone",
	}
	// skipReasons[node down?] is skipReason's text for the terminal statuses.
	skipReasons = [2][len(allocReasons)]string{
		{
			kindComplete: "allocation complete, node gone: skip node step",
			kindFailed:   "allocation failed, node gone: skip node step",
			kindLost:     "allocation lost, node gone: skip node step",
			kindGone:     "allocation gone, node gone: skip node step",
		},
		{
			kindComplete: "allocation complete, node down: skip node step",
			kindFailed:   "allocation failed, node down: skip node step",
			kindLost:     "allocation lost, node down: skip node step",
			kindGone:     "allocation gone, node down: skip node step",
		},
	}
)

// reason is "allocation <status>", constant for the known statuses so the
// common case does not allocate.
func (k allocKind) reason(status string) string {
	if r := allocReasons[k]; r != "" {
		return r
	}
	return "allocation " + status
}

// skipReason explains a release that skips the node step (node is
// NodeDown or NodeGone).
func (k allocKind) skipReason(status, node string) string {
	down := 0
	if node == NodeDown {
		down = 1
	}
	if r := skipReasons[down][k]; r != "" {
		return r
	}
	return k.reason(status) + ", node " + node + ": skip node step"
}
