package plugins

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
)

func fenceRequest(node, external string) *abi.FenceRequest {
	return &abi.FenceRequest{
		NowUnixMs: 1_700_000_000_000,
		Node:      abi.NodeView{ID: node, Status: "down", LastSeenAgeMs: 120_000, ExternalID: external},
		Plugin:    abi.PluginView{ID: "fence-pd"},
		LostAgeMs: 90_000,
		Volume:    abi.VolumeView{Namespace: "default", ID: "db", PluginID: "fence-pd"},
	}
}

// TestConfirmFenceModule: an ABI 1.1 adapter (fence-adapter) is found at
// load, asked through the manager, and its answers validated; a 1.0
// adapter is never asked.
func TestConfirmFenceModule(t *testing.T) {
	fence := exampleWasm(t, "fence-adapter")
	gcepd := exampleWasm(t, "gcepd-adapter")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "fence-adapter", fence, manifest("csi-adapter", `plugin_ids = ["fence-*"]
config = { terminated = "i-dead", retry_after_ms = "30000" }`))
		writeModule(t, dir, "fence-other-node", fence, manifest("csi-adapter", `config = { mode = "other-node" }`))
		writeModule(t, dir, "fence-error", fence, manifest("csi-adapter", `config = { mode = "error" }`))
		writeModule(t, dir, "fence-no-reason", fence, manifest("csi-adapter", `config = { mode = "no-reason" }`))
		writeModule(t, dir, "gcepd-adapter", gcepd, manifest("csi-adapter", `plugin_ids = ["gcepd"]`))
	}, nil)
	ctx := context.Background()

	st, _ := e.m.StatusOf("fence-adapter")
	if st.State != StateServing || st.ABI != "1.1" || !slices.Equal(st.OptionalExports, []string{abi.ExportConfirmFence}) {
		t.Fatalf("fence-adapter status: state %s abi %q optional %q (refusal %q)", st.State, st.ABI, st.OptionalExports, st.Refusal)
	}
	if !e.m.ConfirmsFence("fence-adapter") || e.m.ConfirmsFence("gcepd-adapter") || e.m.ConfirmsFence("no-such-module") {
		t.Fatal("ConfirmsFence does not follow the export")
	}
	if st, _ := e.m.StatusOf("gcepd-adapter"); st.ABI != "1.0" {
		t.Errorf("gcepd-adapter speaks ABI %q, want 1.0", st.ABI)
	}

	resp, err := e.m.ConfirmFence(ctx, "fence-adapter", fenceRequest("n1", "i-dead"))
	if err != nil || !resp.Confirmed || resp.NodeID != "n1" || !strings.Contains(resp.Reason, "i-dead") {
		t.Fatalf("listed instance: %+v, %v", resp, err)
	}
	resp, err = e.m.ConfirmFence(ctx, "fence-adapter", fenceRequest("n2", "i-alive"))
	if err != nil || resp.Confirmed || resp.RetryAfterMs != 30000 {
		t.Fatalf("unlisted instance: %+v, %v", resp, err)
	}

	// An answer about another node is bad output, and never a confirmation.
	resp, err = e.m.ConfirmFence(ctx, "fence-other-node", fenceRequest("n1", "i-dead"))
	if fe := assertFault(t, err, FaultBadOutput); resp != nil || !strings.Contains(fe.Error(), `asked about node "n1"`) {
		t.Fatalf("other-node: %+v, %v", resp, err)
	}
	_, err = e.m.ConfirmFence(ctx, "fence-error", fenceRequest("n1", "i-dead"))
	assertFault(t, err, FaultGuestError)

	// A confirmation without a reason fails the load's self-test.
	if st, _ := e.m.StatusOf("fence-no-reason"); st.State != StateRefused || !strings.Contains(st.Refusal, "without a reason") {
		t.Errorf("fence-no-reason: state %s refusal %q, want refused by the self-test", st.State, st.Refusal)
	}
	// A 1.0 adapter is not asked: not a fault, and not counted.
	if _, err := e.m.ConfirmFence(ctx, "gcepd-adapter", fenceRequest("n1", "i-dead")); !errors.Is(err, ErrNotExported) {
		t.Fatalf("gcepd-adapter: %v, want ErrNotExported", err)
	}
	if st, _ := e.m.StatusOf("gcepd-adapter"); st.Calls != 0 || len(st.Faults) != 0 {
		t.Errorf("gcepd-adapter counted the refused call: calls %d faults %v", st.Calls, st.Faults)
	}
}

// TestOptionalExportSignature: an optional export with another signature
// refuses the module, naming the export and both signatures; a release
// policy's stray volhost_confirm_fence is not the host's business.
func TestOptionalExportSignature(t *testing.T) {
	adapter := func(confirmType byte, code []byte) []byte {
		h := newHmod()
		h.funcs = []hfunc{
			{typ: htI32I64, code: []byte{0x42, 0x00}, export: abi.ExportAdaptRequest},
			{typ: htI32I64, code: []byte{0x42, 0x00}, export: abi.ExportClassifyError},
			{typ: confirmType, code: code, export: abi.ExportConfirmFence},
		}
		return h.build()
	}
	policy := newHmod()
	policy.funcs = []hfunc{{typ: htI32I32, code: i32c(0), export: abi.ExportConfirmFence}}
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "wrong-sig", adapter(htI32I32, i32c(0)), manifest("csi-adapter", ""))
		writeModule(t, dir, "policy-stray", policy.build(), manifest("release-policy", ""))
	}, nil)
	st, _ := e.m.StatusOf("wrong-sig")
	want := "export volhost_confirm_fence (ABI 1.1, optional) has signature (i32) -> (i32), want (i32) -> (i64)"
	if st.State != StateRefused || !strings.Contains(st.Refusal, want) {
		t.Fatalf("wrong-sig: state %s refusal %q, want %q", st.State, st.Refusal, want)
	}
	if st, _ := e.m.StatusOf("policy-stray"); st.State != StateServing || st.ABI != "1.0" || e.m.ConfirmsFence("policy-stray") {
		t.Fatalf("policy-stray: state %s abi %q refusal %q", st.State, st.ABI, st.Refusal)
	}
}

// TestASConfirmFenceMatchesGo: the AssemblyScript SDK's serveConfirmFence
// (as-fence-adapter) answers every request as the Go SDK's module
// (fence-adapter) does, through the host, and is detected as ABI 1.1.
func TestASConfirmFenceMatchesGo(t *testing.T) {
	goWasm, asWasm := exampleWasm(t, "fence-adapter"), exampleWasm(t, "as-fence-adapter")
	cfg := `config = { terminated = "i-dead, projects/p/zones/z/instances/vm-9", retry_after_ms = "45000" }`
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "fence-adapter", goWasm, manifest("csi-adapter", cfg))
		writeModule(t, dir, "as-fence-adapter", asWasm, manifest("csi-adapter", cfg))
	}, nil)
	if st, _ := e.m.StatusOf("as-fence-adapter"); st.State != StateServing || st.ABI != "1.1" {
		t.Fatalf("as-fence-adapter: state %s abi %q refusal %q", st.State, st.ABI, st.Refusal)
	}
	ctx := context.Background()
	var reqs []*abi.FenceRequest
	for i, node := range []abi.NodeView{
		{ID: "n1", Status: "down", ExternalID: "i-dead"},
		{ID: "n2", Status: "gone", ExternalID: "projects/p/zones/z/instances/vm-9", LastSeenAgeMs: 1},
		{ID: "n3", Status: "down", Meta: map[string]string{"instance": "i-dead"}},
		{ID: "n4", Status: "down", ExternalID: "i-alive", Meta: map[string]string{"instance": "i-alive"}},
		{ID: "n5", Status: "down", ExternalID: "i-dea"},
		{ID: "", Status: "down"},
	} {
		r := fenceRequest(node.ID, "")
		r.Node = node
		r.Attempts = uint32(i)
		r.Claims = []abi.ClaimView{{AllocID: "a1", NodeID: node.ID, State: "taken"}, {AllocID: "a2", NodeID: node.ID}}
		reqs = append(reqs, r)
	}
	for _, req := range reqs {
		want, werr := e.m.ConfirmFence(ctx, "fence-adapter", req)
		got, gerr := e.m.ConfirmFence(ctx, "as-fence-adapter", req)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("node %q: Go %v, AS %v", req.Node.ID, werr, gerr)
		}
		if werr == nil && *got != *want {
			t.Errorf("node %q: AS answers %+v, Go %+v", req.Node.ID, *got, *want)
		}
	}
}
