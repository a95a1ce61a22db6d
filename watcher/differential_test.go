package watcher

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// differentialViews is the size of the generated corpus: at least 10,000
// volume views, enough to cover every status and state combination many
// times over.
const differentialViews = 10_000

// randomPolicyRequest generates one volume view: 0..12 claims (now and then
// more than the policy's index threshold, so its map path runs too) in
// random states and attempts, allocations in every status the views carry
// plus unknown, empty and absent ones, nodes ready, down, gone, unknown or
// absent, shared nodes, and duplicate allocation entries.
func randomPolicyRequest(r *rand.Rand, i int) *abi.PolicyRequest {
	allocStatuses := []string{
		defaultpolicy.AllocPending, defaultpolicy.AllocRunning, defaultpolicy.AllocComplete,
		defaultpolicy.AllocFailed, defaultpolicy.AllocLost, defaultpolicy.AllocGone, "evicting", "",
	}
	nodeStatuses := []string{defaultpolicy.NodeReady, defaultpolicy.NodeDown, defaultpolicy.NodeGone, "initializing", ""}
	states := []string{string(structs.ClaimTaken), string(structs.ClaimNodeDetached),
		string(structs.ClaimControllerDetached), string(structs.ClaimReadyToFree)}
	modes := []string{"read", "write"}
	errKinds := []string{"", "csi", "module", "precondition"}

	n := r.Intn(13)
	if r.Intn(50) == 0 {
		n = 33 + r.Intn(8)
	}
	req := &abi.PolicyRequest{
		NowUnixMs: 1_790_000_000_000 + r.Int63n(1e9),
		Volume: abi.VolumeView{Namespace: "diff", ID: fmt.Sprintf("vol-%d", i), PluginID: "csi",
			AccessMode: "multi-node-multi-writer", AttachmentMode: "file-system", ExternalID: fmt.Sprintf("disk-%d", i)},
	}
	nodes := 1 + r.Intn(4)
	seenNode := map[string]bool{}
	for j := range n {
		c := abi.ClaimView{
			AllocID: fmt.Sprintf("a%d-%d", i, j), NodeID: fmt.Sprintf("n%d", r.Intn(nodes)),
			Mode: modes[r.Intn(2)], State: states[r.Intn(len(states))], Attempts: uint32(r.Intn(20)),
			LastErrorKind: errKinds[r.Intn(len(errKinds))], ExternalNodeID: "ext",
		}
		if c.LastErrorKind != "" {
			c.LastErrorCode = uint32(r.Intn(17))
		}
		req.Claims = append(req.Claims, c)
		if r.Intn(8) != 0 { // else absent: a garbage-collected allocation
			st := allocStatuses[r.Intn(len(allocStatuses))]
			a := abi.AllocView{ID: c.AllocID, ClientStatus: st}
			if defaultpolicy.Terminal(st) {
				a.TerminalAgeMs = r.Int63n(3_600_000)
			}
			if r.Intn(20) == 0 { // a stale duplicate before the real entry
				req.Allocs = append(req.Allocs, abi.AllocView{ID: c.AllocID, ClientStatus: allocStatuses[r.Intn(len(allocStatuses))]})
			}
			req.Allocs = append(req.Allocs, a)
		}
		if !seenNode[c.NodeID] && r.Intn(8) != 0 { // else absent: a gone node
			seenNode[c.NodeID] = true
			req.Nodes = append(req.Nodes, abi.NodeView{ID: c.NodeID, Status: nodeStatuses[r.Intn(len(nodeStatuses))],
				LastSeenAgeMs: r.Int63n(600_000)})
		}
	}
	// Allocations in any order (the host sends them in claim order).
	r.Shuffle(len(req.Allocs), func(a, b int) { req.Allocs[a], req.Allocs[b] = req.Allocs[b], req.Allocs[a] })
	return req
}

// normalized makes an empty decision list compare equal to a nil one (the
// wire format does not tell them apart).
func normalized(resp *abi.PolicyResponse) *abi.PolicyResponse {
	if resp == nil {
		return nil
	}
	out := *resp
	if len(out.Decisions) == 0 {
		out.Decisions = nil
	}
	return &out
}

// TestDifferentialDefaultPolicy: the default-policy Wasm module, called the
// way the watcher calls it (WasmModules over a plugins.Manager), decides
// exactly like the native DefaultPolicy over abi/defaultpolicy's corpus and
// 10,000 generated volume views (seeded, so a failure reproduces). The two
// share abi/defaultpolicy.Decide, so a difference is a bug in the codec, the
// guest SDK or the runtime.
//
// as-default-policy, the AssemblyScript port (abi/guest-as), shares no code
// with the native policy, so for it the test checks the port's logic too.
func TestDifferentialDefaultPolicy(t *testing.T) {
	for _, module := range []string{"default-policy", "as-default-policy"} {
		t.Run(module, func(t *testing.T) { testDifferential(t, module) })
	}
}

func testDifferential(t *testing.T, module string) {
	m := newWasmManager(t, nil, moduleFile{name: module, example: module,
		manifest: policyManifest(`default = true`, "")})
	mods := WasmModules(m, nil)

	corpus := defaultpolicy.Corpus()
	const seed = 20261129
	r := rand.New(rand.NewSource(seed))
	for i := range differentialViews {
		corpus = append(corpus, randomPolicyRequest(r, i))
	}
	ctx := context.Background()
	var releases, skips, waits int
	for i, req := range corpus {
		vol := &structs.Volume{Namespace: req.Volume.Namespace, ID: req.Volume.ID, PluginID: req.Volume.PluginID}
		policy := mods.PolicyFor(vol)
		if named, ok := policy.(attach.Named); !ok || named.ModuleName() != module {
			t.Fatalf("view %d is not served by the %s module: %T", i, module, policy)
		}
		want, err := DefaultPolicy{}.DecideRelease(ctx, req)
		if err != nil {
			t.Fatalf("view %d: native: %v", i, err)
		}
		got, err := policy.DecideRelease(ctx, req)
		if err != nil {
			t.Fatalf("view %d: wasm: %v\nrequest: %+v", i, err, req)
		}
		if !reflect.DeepEqual(normalized(got), normalized(want)) {
			t.Fatalf("view %d (seed %d) decisions differ\nrequest: %+v\nwasm:   %+v\nnative: %+v", i, seed, req, got, want)
		}
		for _, d := range want.Decisions {
			switch d.Action {
			case abi.ActionRelease:
				releases++
			case abi.ActionReleaseSkipNode:
				skips++
			case abi.ActionWait:
				waits++
			}
		}
	}
	// The corpus must exercise every action, or equality proves little.
	if releases == 0 || skips == 0 || waits == 0 || len(corpus) < differentialViews {
		t.Fatalf("corpus of %d views: %d releases, %d skip-node releases, %d waits", len(corpus), releases, skips, waits)
	}
	t.Logf("%d views identical: %d releases, %d skip-node releases, %d waits", len(corpus), releases, skips, waits)
}
