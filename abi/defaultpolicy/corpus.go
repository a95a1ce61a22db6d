package defaultpolicy

import (
	"fmt"

	"github.com/volhost/volhost/abi"
)

// Corpus returns a deterministic set of policy requests covering every
// combination the default policy distinguishes: allocation status (each
// known status, an unknown one, an empty one, absent), node status (ready,
// down, gone, absent) and claim state, one claim per request; plus
// multi-claim volumes mixing them, the 8-claim benchmark shape, and an empty
// request. The differential test runs it through the native default and the
// default-policy Wasm module and requires equal decisions.
func Corpus() []*abi.PolicyRequest {
	const now = 1_790_000_000_000
	allocStatuses := []string{AllocPending, AllocRunning, AllocComplete, AllocFailed, AllocLost, AllocGone, "evicting", "", "<absent>"}
	nodeStatuses := []string{NodeReady, NodeDown, NodeGone, "<absent>"}
	states := []string{ClaimTaken, "node-detached", "controller-detached", "ready-to-free"}
	vol := abi.VolumeView{Namespace: "corpus", ID: "vol", PluginID: "gcepd", AccessMode: "single-node-writer", AttachmentMode: "file-system", ExternalID: "disk"}

	var out []*abi.PolicyRequest
	var all []abi.ClaimView
	var allAllocs []abi.AllocView
	var allNodes []abi.NodeView
	i := 0
	for _, as := range allocStatuses {
		for _, ns := range nodeStatuses {
			for _, st := range states {
				i++
				allocID, nodeID := fmt.Sprintf("alloc-%03d", i), fmt.Sprintf("node-%03d", i)
				req := &abi.PolicyRequest{NowUnixMs: now, Volume: vol}
				c := abi.ClaimView{AllocID: allocID, NodeID: nodeID, Mode: "write", State: st, Attempts: uint32(i % 3)}
				req.Claims = []abi.ClaimView{c}
				if as != "<absent>" {
					age := int64(0)
					if Terminal(as) {
						age = int64(i) * 1000
					}
					req.Allocs = []abi.AllocView{{ID: allocID, ClientStatus: as, TerminalAgeMs: age}}
				}
				if ns != "<absent>" {
					req.Nodes = []abi.NodeView{{ID: nodeID, Status: ns, LastSeenAgeMs: int64(i)}}
				}
				out = append(out, req)
				all = append(all, req.Claims...)
				allAllocs = append(allAllocs, req.Allocs...)
				allNodes = append(allNodes, req.Nodes...)
			}
		}
	}
	// Every claim in one volume (above the index's map threshold).
	out = append(out, &abi.PolicyRequest{NowUnixMs: now, Volume: vol, Claims: all, Allocs: allAllocs, Nodes: allNodes})
	// Windows of 8 claims (the benchmark shape), sharing nodes and allocations.
	for start := 0; start+8 <= len(all); start += 13 {
		req := &abi.PolicyRequest{NowUnixMs: now, Volume: vol, Claims: all[start : start+8]}
		for _, c := range req.Claims {
			for _, a := range allAllocs {
				if a.ID == c.AllocID {
					req.Allocs = append(req.Allocs, a)
				}
			}
			for _, n := range allNodes {
				if n.ID == c.NodeID {
					req.Nodes = append(req.Nodes, n)
				}
			}
		}
		out = append(out, req)
	}
	// Two claims on one node, one allocation still running.
	out = append(out, &abi.PolicyRequest{NowUnixMs: now, Volume: vol,
		Claims: []abi.ClaimView{{AllocID: "a", NodeID: "n", State: ClaimTaken}, {AllocID: "b", NodeID: "n", State: ClaimTaken}},
		Allocs: []abi.AllocView{{ID: "a", ClientStatus: AllocRunning}, {ID: "b", ClientStatus: AllocComplete, TerminalAgeMs: 10}},
		Nodes:  []abi.NodeView{{ID: "n", Status: NodeDown}},
	})
	// No claims at all.
	out = append(out, &abi.PolicyRequest{NowUnixMs: now, Volume: vol})
	return out
}
