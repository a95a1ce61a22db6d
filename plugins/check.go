package plugins

import (
	"context"
	"fmt"

	"github.com/volhost/volhost/abi"
)

// checkPolicyResponse validates a release policy's answer against its
// request: at most one decision per claim, only for claims it was given,
// with a known action and no negative wait. Anything else is bad output:
// acting on a decision for a claim the policy never saw would release the
// wrong claim. (Whether the claim's allocation really is terminal is the
// watcher's invariant to check: a release's first precondition.)
func checkPolicyResponse(req *abi.PolicyRequest, resp *abi.PolicyResponse) error {
	if len(resp.Decisions) > len(req.Claims) {
		return fmt.Errorf("%d decisions for %d claims", len(resp.Decisions), len(req.Claims))
	}
	// Which claims have a decision, by the index of the first claim with
	// the decision's alloc ID: a bit set on the stack for the usual volume
	// (a map per call was a large part of a call's host side:
	// BenchmarkHostPath), an
	// index of the claims above 64.
	var small [1]uint64
	seen := small[:]
	var index map[string]int
	if n := len(req.Claims); n > 64 {
		seen = make([]uint64, (n+63)/64)
		index = make(map[string]int, n)
		for i := n - 1; i >= 0; i-- {
			index[req.Claims[i].AllocID] = i
		}
	}
	for i := range resp.Decisions {
		d := &resp.Decisions[i]
		c := claimIndex(req, index, d.AllocID)
		if c < 0 {
			return fmt.Errorf("decision for alloc %q, which is not a claim of the request", d.AllocID)
		}
		if seen[c/64]&(1<<(c%64)) != 0 {
			return fmt.Errorf("two decisions for alloc %q", d.AllocID)
		}
		seen[c/64] |= 1 << (c % 64)
		switch d.Action {
		case abi.ActionRelease, abi.ActionWait, abi.ActionReleaseSkipNode:
		default:
			return fmt.Errorf("decision for alloc %q has unknown action %d", d.AllocID, d.Action)
		}
		if d.RetryAfterMs < 0 {
			return fmt.Errorf("decision for alloc %q has negative retry_after_ms %d", d.AllocID, d.RetryAfterMs)
		}
	}
	return nil
}

// claimIndex is the index of the first claim of req with allocID, or -1;
// index, when not nil, maps every alloc ID of req's claims to it.
func claimIndex(req *abi.PolicyRequest, index map[string]int, allocID string) int {
	if index != nil {
		if i, ok := index[allocID]; ok {
			return i
		}
		return -1
	}
	for i := range req.Claims {
		// The last bytes first: a request's alloc IDs have one length
		// (alloc-1, alloc-2; UUIDs) and differ there, so only the match
		// pays a full comparison (the comparisons were most of the
		// answer's check).
		if id := req.Claims[i].AllocID; len(id) == len(allocID) && (id == "" || id[len(id)-1] == allocID[len(id)-1]) && id == allocID {
			return i
		}
	}
	return -1
}

// checkClassifyResponse validates an adapter's error classification.
func checkClassifyResponse(resp *abi.ClassifyResponse) error {
	switch resp.Outcome {
	case abi.OutcomeDone, abi.OutcomeRetry, abi.OutcomeFatal:
	default:
		return fmt.Errorf("unknown outcome %d", resp.Outcome)
	}
	if resp.RetryAfterMs < 0 {
		return fmt.Errorf("negative retry_after_ms %d", resp.RetryAfterMs)
	}
	return nil
}

// Self-test requests: synthetic, fixed, with the time in the request so
// the answer is deterministic. They run once per candidate generation on
// its canary instance, before it may serve.
const selfTestNow = 1_700_000_000_000

func selfTestPolicyRequest() *abi.PolicyRequest {
	return &abi.PolicyRequest{
		NowUnixMs: selfTestNow,
		Volume: abi.VolumeView{Namespace: "volhost-selftest", ID: "selftest", PluginID: "selftest",
			AccessMode: "single-node-writer", AttachmentMode: "file-system"},
		Claims: []abi.ClaimView{
			{AllocID: "selftest-done", NodeID: "selftest-node", Mode: "write", State: "taken"},
			{AllocID: "selftest-running", NodeID: "selftest-node", Mode: "read", State: "taken"},
		},
		Allocs: []abi.AllocView{
			{ID: "selftest-done", ClientStatus: "complete", TerminalAgeMs: 3_600_000},
			{ID: "selftest-running", ClientStatus: "running"},
		},
		Nodes: []abi.NodeView{{ID: "selftest-node", Status: "ready", ExternalID: "selftest-node"}},
	}
}

func selfTestAdapterRequest() *abi.AdapterRequest {
	return &abi.AdapterRequest{
		Step:      "controller-unpublish",
		Claim:     abi.ClaimView{AllocID: "selftest-done", NodeID: "selftest-node", Mode: "write", State: "node-detached"},
		Volume:    abi.VolumeView{Namespace: "volhost-selftest", ID: "selftest", PluginID: "selftest", ExternalID: "selftest-disk"},
		Node:      abi.NodeView{ID: "selftest-node", Status: "ready", ExternalID: "selftest-node"},
		Plugin:    abi.PluginView{ID: "selftest", PublishUnpublish: true},
		NowUnixMs: selfTestNow,
	}
}

func selfTestClassifyRequest() *abi.ClassifyRequest {
	return &abi.ClassifyRequest{Step: "controller-unpublish", Code: 5, Message: "disk not found", Attempts: 1,
		PluginID: "selftest", VolumeID: "selftest"}
}

// selfTest runs the synthetic requests of the module's kind on inst.
func (g *generation) selfTest(ctx context.Context, inst *instance) error {
	run := func(export string, req []byte, decode func([]byte) (string, error)) error {
		timeout := max(g.initTimeout, 10*g.man.Limits.CallTimeout)
		cctx, cancel := context.WithTimeout(context.WithValue(ctx, initDeadline{}, timeout), timeout)
		defer cancel()
		return g.invokeOn(cctx, ctx, inst, export, req, decode)
	}
	switch g.man.Kind {
	case abi.KindReleasePolicy:
		req := selfTestPolicyRequest()
		var resp abi.PolicyResponse
		return run(abi.ExportDecideRelease, req.MarshalAppend(nil), policyDecoder(req, &resp))
	default:
		areq := selfTestAdapterRequest()
		var aresp abi.AdapterResponse
		if err := run(abi.ExportAdaptRequest, areq.MarshalAppend(nil), adapterDecoder(&aresp)); err != nil {
			return err
		}
		creq := selfTestClassifyRequest()
		var cresp abi.ClassifyResponse
		if err := run(abi.ExportClassifyError, creq.MarshalAppend(nil), classifyDecoder(&cresp)); err != nil {
			return err
		}
		if !g.exports(abi.ExportConfirmFence) {
			return nil
		}
		freq := selfTestFenceRequest()
		var fresp abi.FenceResponse
		return run(abi.ExportConfirmFence, freq.MarshalAppend(nil), fenceDecoder(freq, &fresp))
	}
}

// Decoders shared by calls and the self-test: unmarshal, then validate;
// they return the guest's Error string separately (a guest-error fault).

func policyDecoder(req *abi.PolicyRequest, resp *abi.PolicyResponse) func([]byte) (string, error) {
	return func(b []byte) (string, error) {
		if err := resp.Unmarshal(b); err != nil {
			return "", err
		}
		if resp.Error != "" {
			return resp.Error, nil
		}
		return "", checkPolicyResponse(req, resp)
	}
}

func adapterDecoder(resp *abi.AdapterResponse) func([]byte) (string, error) {
	return func(b []byte) (string, error) {
		if err := resp.Unmarshal(b); err != nil {
			return "", err
		}
		return resp.Error, nil
	}
}

func classifyDecoder(resp *abi.ClassifyResponse) func([]byte) (string, error) {
	return func(b []byte) (string, error) {
		if err := resp.Unmarshal(b); err != nil {
			return "", err
		}
		if resp.Error != "" {
			return resp.Error, nil
		}
		return "", checkClassifyResponse(resp)
	}
}
