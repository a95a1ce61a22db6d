package plugins

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// The AssemblyScript guests (abi/guest-as, examples/plugins/as-*) must
// answer exactly as their Go originals: as-default-policy as
// abi/defaultpolicy, as-gcepd-adapter as the gcepd-adapter module. These
// tests build them with the SDK's pinned compiler, load them through the
// real host (Manager) with their shipped manifests, and compare responses
// over generated requests; the direct tests call the module through wazero
// without the host's validation, to reach odd and malformed requests too.

// shippedManifest is examples/plugins/NAME/NAME.hcl.
func shippedManifest(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pluginstest.RepoRoot(), "examples", "plugins", name, name+".hcl"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// asEnv loads both AS modules with their shipped manifests, and the Go
// gcepd-adapter (plugin ID gcepd) to compare with.
func asEnv(t *testing.T) *testEnv {
	t.Helper()
	policy, adapter := exampleWasm(t, "as-default-policy"), exampleWasm(t, "as-gcepd-adapter")
	goAdapter := exampleWasm(t, "gcepd-adapter")
	return newEnv(t, func(dir string) {
		writeModule(t, dir, "as-default-policy", policy, shippedManifest(t, "as-default-policy"))
		writeModule(t, dir, "as-gcepd-adapter", adapter, shippedManifest(t, "as-gcepd-adapter"))
		writeModule(t, dir, "gcepd-adapter", goAdapter, shippedManifest(t, "gcepd-adapter"))
	}, func(o *Options) {
		// The comparisons ask for guest errors on purpose, many in a row.
		o.BreakerThreshold = 1 << 30
	})
}

func TestASModulesLoad(t *testing.T) {
	e := asEnv(t)
	for _, tc := range []struct {
		name, kind string
		steps      []string
		plugins    []string
		limitPages uint32
	}{
		{"as-default-policy", string(abi.KindReleasePolicy), nil, nil, 16},
		{"as-gcepd-adapter", string(abi.KindCSIAdapter), []string{abi.StepControllerPublish, abi.StepControllerUnpublish}, []string{"gcepd-as"}, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := e.m.StatusOf(tc.name)
			if !ok {
				t.Fatal("not loaded")
			}
			if s.State != StateServing || s.Kind != tc.kind || s.Version != "1.0.0" || s.Default ||
				!slices.Equal(s.AdaptSteps, tc.steps) || !slices.Equal(s.PluginIDs, tc.plugins) || s.MemoryLimitPages != tc.limitPages {
				t.Fatalf("status %+v", s)
			}
			if s.Timeouts != TimeoutsFlag {
				t.Fatalf("Timeouts = %q, want %q (an AS module must be instrumentable: no start section)", s.Timeouts, TimeoutsFlag)
			}
		})
	}
	// The Go adapter keeps gcepd; the AS one serves gcepd-as (both match
	// gcepd-*, the lexically first name wins).
	for plugin, want := range map[string]string{"gcepd": "gcepd-adapter", "gcepd-as": "as-gcepd-adapter"} {
		if got, ok := e.m.Match(abi.KindCSIAdapter, Target{Namespace: "default", VolumeID: "v", PluginID: plugin}); !ok || got != want {
			t.Errorf("Match(%s) = %q, %v; want %q", plugin, got, ok, want)
		}
	}
	// Not the default policy: it must not take over from default-policy.
	if got, ok := e.m.Match(abi.KindReleasePolicy, Target{Namespace: "default", VolumeID: "v", PluginID: "gcepd"}); ok {
		t.Errorf("as-default-policy matched a volume it was not given: %q", got)
	}
}

// ---- generated requests ----

var (
	asAllocStatuses = []string{"pending", "running", "complete", "failed", "lost", "gone", "", "evicted", "runnin", "completed"}
	asNodeStatuses  = []string{"ready", "down", "gone", "", "draining", "Down"}
	asClaimStates   = []string{"taken", "node-detached", "controller-detached", "ready-to-free", "", "Taken"}
)

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// genPolicyRequest makes a request with up to 10 claims. With odd, it also
// makes what the watcher never sends (duplicate or empty alloc and node
// IDs, allocations out of claim order, non-ASCII statuses); the host's
// validation refuses some of those responses, so only direct calls use it.
func genPolicyRequest(r *rand.Rand, odd bool) *abi.PolicyRequest {
	n := r.IntN(11)
	if r.IntN(4) == 0 {
		n = 1
	}
	req := &abi.PolicyRequest{NowUnixMs: r.Int64N(1 << 42),
		Volume: abi.VolumeView{Namespace: "default", ID: fmt.Sprintf("vol-%d", r.IntN(100)), PluginID: "gcepd"}}
	id := func(prefix string, i int) string {
		if odd && r.IntN(10) == 0 {
			// Empty, repeated, non-ASCII, and longer than a one-byte length.
			return pick(r, []string{"", prefix + "-0", "é" + prefix, prefix + "\x00", strings.Repeat(prefix, 40)})
		}
		return fmt.Sprintf("%s-%d", prefix, i)
	}
	for i := range n {
		c := abi.ClaimView{AllocID: fmt.Sprintf("alloc-%d", i), NodeID: fmt.Sprintf("node-%d", r.IntN(4)), Mode: "write",
			State: pick(r, asClaimStates), Attempts: uint32(r.IntN(5))}
		if odd {
			c.AllocID = id("alloc", i)
			c.NodeID = id("node", r.IntN(4))
		}
		req.Claims = append(req.Claims, c)
		if r.IntN(8) != 0 { // sometimes the allocation is gone from the request
			a := abi.AllocView{ID: c.AllocID, ClientStatus: pick(r, asAllocStatuses), TerminalAgeMs: r.Int64N(1 << 30)}
			if odd && r.IntN(8) == 0 {
				a.ClientStatus = "ünknown"
			}
			req.Allocs = append(req.Allocs, a)
		}
	}
	if odd && len(req.Allocs) > 1 && r.IntN(3) == 0 {
		r.Shuffle(len(req.Allocs), func(i, j int) { req.Allocs[i], req.Allocs[j] = req.Allocs[j], req.Allocs[i] })
		req.Allocs = append(req.Allocs, abi.AllocView{ID: req.Allocs[0].ID, ClientStatus: pick(r, asAllocStatuses)})
	}
	for i := range 4 {
		if r.IntN(3) == 0 {
			continue // node gone from the request
		}
		nd := abi.NodeView{ID: fmt.Sprintf("node-%d", i), Status: pick(r, asNodeStatuses), LastSeenAgeMs: r.Int64N(1 << 20)}
		if odd {
			nd.ID = id("node", i)
		}
		req.Nodes = append(req.Nodes, nd)
	}
	if r.IntN(5) == 0 { // more than the Go index's map threshold
		for i := range 40 {
			req.Nodes = append(req.Nodes, abi.NodeView{ID: fmt.Sprintf("extra-%d", i), Status: "ready"})
		}
	}
	return req
}

var asSteps = []string{"node-unpublish", "node-unstage", "controller-unpublish", "controller-publish", "node-stage", "node-publish", "", "weird"}

func genAdapterRequest(r *rand.Rand) *abi.AdapterRequest {
	meta := map[string]string{}
	for _, k := range []string{"gce.project", "gce.zone", "gce.instance", "other"} {
		switch r.IntN(3) {
		case 0:
			meta[k] = pick(r, []string{"p", "us-central1-a", "vm-1", "x y", "é\"q"})
		case 1:
			if r.IntN(4) == 0 {
				meta[k] = ""
			}
		}
	}
	opt := func(s string) string {
		if r.IntN(3) == 0 {
			return ""
		}
		return s
	}
	req := &abi.AdapterRequest{
		Step:  pick(r, asSteps),
		Claim: abi.ClaimView{AllocID: "alloc-0", NodeID: opt(pick(r, []string{"node-0", "n\"1", "é\n", "\xff"})), ExternalNodeID: opt("projects/a/zones/b/instances/c")},
		Volume: abi.VolumeView{Namespace: opt("default"), ID: opt("web"), PluginID: "gcepd-as",
			ExternalID: opt("projects/p/zones/z/disks/web")},
		Node:      abi.NodeView{ID: opt("node-0"), Status: "ready", Meta: meta, ExternalID: opt("projects/x/zones/y/instances/z")},
		Plugin:    abi.PluginView{ID: "gcepd-as", PublishUnpublish: r.IntN(2) == 0},
		NowUnixMs: r.Int64N(1 << 42),
	}
	if r.IntN(3) == 0 {
		req.Volume.Context = map[string]string{"k": "v", "fsType": "ext4"}
	}
	if r.IntN(3) == 0 {
		req.Node.Meta = nil
	}
	return req
}

// sameDecisions compares a module's decisions with the native ones (nil
// and empty are the same: an empty response decodes to nil).
func sameDecisions(got, want []abi.Decision) bool {
	return len(got) == len(want) && (len(got) == 0 || reflect.DeepEqual(got, want))
}

// TestASDefaultPolicyMatchesNative compares as-default-policy through the
// host with defaultpolicy.Decide called natively.
func TestASDefaultPolicyMatchesNative(t *testing.T) {
	e := asEnv(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 400 {
		req := genPolicyRequest(r, false)
		resp, err := e.m.DecideRelease(ctx, "as-default-policy", req)
		if err != nil {
			t.Fatalf("request %d: %v\n%+v", i, err, req)
		}
		if want := defaultpolicy.Decide(req).Decisions; !sameDecisions(resp.Decisions, want) {
			t.Fatalf("request %d: AS decisions\n%+v\nnative\n%+v\nrequest %+v", i, resp.Decisions, want, req)
		}
	}
}

// guestErr is the guest's error text of a guest-error fault, "" for nil.
func guestErr(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var fe *FaultError
	if !errors.As(err, &fe) || fe.Kind != FaultGuestError {
		t.Fatalf("error %v, want a guest-error fault", err)
	}
	return fe.Err.Error()
}

// TestASGCEPDAdapterMatchesGo compares as-gcepd-adapter with the Go
// gcepd-adapter module, both through the host, request by request.
func TestASGCEPDAdapterMatchesGo(t *testing.T) {
	e := asEnv(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		req := genAdapterRequest(r)
		got, gerr := e.m.AdaptRequest(ctx, "as-gcepd-adapter", req)
		want, werr := e.m.AdaptRequest(ctx, "gcepd-adapter", req)
		ge, we := guestErr(t, gerr), guestErr(t, werr)
		if ge != we {
			t.Fatalf("request %d: AS error %q, Go error %q\n%+v", i, ge, we, req)
		}
		if we != "" {
			continue
		}
		if got.VolumeID != want.VolumeID || got.NodeID != want.NodeID || len(got.SecretKeys) != len(want.SecretKeys) ||
			len(got.VolumeContext) != len(want.VolumeContext) || (len(want.VolumeContext) > 0 && !reflect.DeepEqual(got.VolumeContext, want.VolumeContext)) {
			t.Fatalf("request %d: AS %+v, Go %+v\n%+v", i, got, want, req)
		}
	}
	for code := range uint32(20) {
		for _, step := range asSteps {
			req := &abi.ClassifyRequest{Step: step, Code: code, Message: "m", Attempts: 2, PluginID: "gcepd-as", VolumeID: "v"}
			got, gerr := e.m.ClassifyError(ctx, "as-gcepd-adapter", req)
			want, werr := e.m.ClassifyError(ctx, "gcepd-adapter", req)
			if ge, we := guestErr(t, gerr), guestErr(t, werr); ge != we {
				t.Fatalf("classify %d at %q: AS error %q, Go error %q", code, step, ge, we)
			}
			if werr == nil && *got != *want {
				t.Fatalf("classify %d at %q: AS %+v, Go %+v", code, step, got, want)
			}
		}
	}
}

// ---- direct calls ----

func TestASConfigure(t *testing.T) {
	for _, tc := range []struct {
		module, prefix string
		steps          []string
	}{
		{"as-default-policy", "default-policy", nil},
		{"as-gcepd-adapter", "gcepd-adapter", []string{abi.StepControllerPublish, abi.StepControllerUnpublish}},
	} {
		in := newRawInstance(t, context.Background(), exampleWasm(t, tc.module))
		for _, cfg := range []struct {
			config  map[string]string
			wantErr string
		}{
			{nil, ""},
			{map[string]string{"zone": "z"}, tc.prefix + ` takes no config, got keys ["zone"]`},
			{map[string]string{"b": "1", "a": "2", "a\"\n\x01é\u00a0": ""}, tc.prefix + ` takes no config, got keys ["a" "a\"\n\x01é\u00a0" "b"]`},
		} {
			req := (&abi.ConfigureRequest{ModuleName: tc.module, Config: cfg.config}).MarshalAppend(nil)
			var resp abi.ConfigureResponse
			if err := resp.Unmarshal(in.call(t, abi.ExportConfigure, req)); err != nil {
				t.Fatal(err)
			}
			if resp.Version != "1.0.0" || resp.Error != cfg.wantErr || !slices.Equal(resp.AdaptSteps, tc.steps) {
				t.Errorf("%s configure %v = %+v, want error %q", tc.module, cfg.config, resp, cfg.wantErr)
			}
		}
	}
}

// TestASDefaultPolicyDifferential compares as-default-policy with
// defaultpolicy.Decide over 10,000 generated requests, odd ones included,
// called directly (no host validation in between).
func TestASDefaultPolicyDifferential(t *testing.T) {
	in := newRawInstance(t, context.Background(), exampleWasm(t, "as-default-policy"))
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 10000 {
		req := genPolicyRequest(r, i%2 == 0)
		var resp abi.PolicyResponse
		if err := resp.Unmarshal(in.call(t, abi.ExportDecideRelease, req.MarshalAppend(nil))); err != nil {
			t.Fatalf("request %d: response: %v", i, err)
		}
		if resp.Error != "" {
			t.Fatalf("request %d: error %q", i, resp.Error)
		}
		if want := defaultpolicy.Decide(req).Decisions; !sameDecisions(resp.Decisions, want) {
			t.Fatalf("request %d: AS decisions\n%+v\nnative\n%+v\nrequest %+v", i, resp.Decisions, want, req)
		}
	}
	// Every call's memory is dropped at the next: an instance stays at
	// what its largest request needs (a few KiB here), however many calls.
	if pages := in.mod.Memory().Size() / 65536; pages > 2 {
		t.Errorf("memory grew to %d pages over 10,000 calls", pages)
	}
}

// TestASBuffer checks volhost_buffer's refusals and a length that does not
// fit the buffer: an error response, as the Go SDK gives, not a trap.
func TestASBuffer(t *testing.T) {
	in := newRawInstance(t, context.Background(), exampleWasm(t, "as-gcepd-adapter"))
	buffer := in.mod.ExportedFunction(abi.ExportBuffer)
	for _, size := range []int64{-1, abi.MaxMessageSize + 1} {
		res, err := buffer.Call(in.ctx, uint64(uint32(int32(size))))
		if err != nil || res[0] != 0 {
			t.Errorf("volhost_buffer(%d) = %v, %v; want 0", size, res, err)
		}
	}
	res, err := buffer.Call(in.ctx, 10)
	if err != nil || res[0] == 0 {
		t.Fatalf("volhost_buffer(10) = %v, %v", res, err)
	}
	res, err = in.mod.ExportedFunction(abi.ExportClassifyError).Call(in.ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ptr, n := abi.UnpackResult(res[0])
	b, _ := in.mod.Memory().Read(ptr, n)
	var resp abi.ClassifyResponse
	if err := resp.Unmarshal(b); err != nil || resp.Error != "request length 1048576 does not fit the 4096-byte buffer from volhost_buffer" {
		t.Fatalf("response %+v, %v", resp, err)
	}
}

// appendUnknown appends fields the schema does not have, one of each wire
// type (a group included), which a decoder must skip.
func appendUnknown(b []byte) []byte {
	b = protowire.AppendTag(b, 99, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<40)
	b = protowire.AppendTag(b, 100, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("later"))
	b = protowire.AppendTag(b, 101, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	b = protowire.AppendTag(b, 102, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 7)
	b = protowire.AppendTag(b, 103, protowire.StartGroupType)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 3)
	return protowire.AppendTag(b, 103, protowire.EndGroupType)
}

// TestASDecoder checks the SDK's decoder against abi's: unknown fields are
// skipped, and a mangled request is answered with an error exactly when
// abi's decoder refuses it, never with a trap.
func TestASDecoder(t *testing.T) {
	in := newRawInstance(t, context.Background(), exampleWasm(t, "as-default-policy"))
	req := &abi.PolicyRequest{NowUnixMs: 5, Volume: abi.VolumeView{ID: "v", Context: map[string]string{"a": "b"}},
		Claims: []abi.ClaimView{{AllocID: "a1", NodeID: "n1", State: "taken"}, {AllocID: "a2", State: "taken"}},
		Allocs: []abi.AllocView{{ID: "a1", ClientStatus: "complete"}, {ID: "a2", ClientStatus: "running"}},
		Nodes:  []abi.NodeView{{ID: "n1", Status: "down"}}}
	want := defaultpolicy.Decide(req).Decisions

	// Unknown fields at the top level and inside a claim.
	b := appendUnknown(req.MarshalAppend(nil))
	claim := appendUnknown((&abi.ClaimView{AllocID: "a3", State: "taken"}).MarshalAppend(nil))
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, claim)
	var resp abi.PolicyResponse
	if err := resp.Unmarshal(in.call(t, abi.ExportDecideRelease, b)); err != nil || resp.Error != "" {
		t.Fatalf("with unknown fields: %v, %q", err, resp.Error)
	}
	wantMore := append(slices.Clone(want), abi.Decision{AllocID: "a3", Action: abi.ActionReleaseSkipNode, Reason: "allocation gone, node gone: skip node step"})
	if !sameDecisions(resp.Decisions, wantMore) {
		t.Fatalf("with unknown fields: %+v, want %+v", resp.Decisions, wantMore)
	}

	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"truncated varint", []byte{0x08, 0x80}},
		{"field 0", []byte{0x00, 0x01}},
		{"bad length", []byte{0x12, 0x05, 0x01}},
		{"claims as varint", []byte{0x18, 0x01}},
		{"alloc ID as varint", []byte{0x1a, 0x02, 0x08, 0x01}},
		{"end group alone", []byte{0x0c}},
		{"reserved wire type", []byte{0x0e}},
		{"overflow", []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"unclosed group", []byte{0xbb, 0x06, 0x08, 0x01}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var native abi.PolicyRequest
			nerr := native.Unmarshal(tc.b)
			var resp abi.PolicyResponse
			if err := resp.Unmarshal(in.call(t, abi.ExportDecideRelease, tc.b)); err != nil {
				t.Fatal(err)
			}
			if (nerr != nil) != (resp.Error != "") {
				t.Fatalf("abi: %v; AS error %q", nerr, resp.Error)
			}
			if nerr != nil && !strings.HasPrefix(resp.Error, "abi: malformed message: PolicyRequest: ") {
				t.Errorf("AS error %q does not say what is malformed", resp.Error)
			}
		})
	}

	// Random corruption of valid requests: the same verdict as abi's decoder.
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 3000 {
		b := genPolicyRequest(r, true).MarshalAppend(nil)
		if len(b) == 0 {
			continue
		}
		for range 1 + r.IntN(3) {
			switch r.IntN(3) {
			case 0:
				b[r.IntN(len(b))] = byte(r.Uint32())
			case 1:
				b = b[:r.IntN(len(b))]
			default:
				b = append(b, byte(r.Uint32()))
			}
			if len(b) == 0 {
				break
			}
		}
		var native abi.PolicyRequest
		nerr := native.Unmarshal(b)
		var resp abi.PolicyResponse
		if err := resp.Unmarshal(in.call(t, abi.ExportDecideRelease, b)); err != nil {
			t.Fatalf("case %d: response: %v", i, err)
		}
		if (nerr != nil) != (resp.Error != "") {
			t.Fatalf("case %d: abi: %v; AS error %q (request %x)", i, nerr, resp.Error, b)
		}
		if nerr == nil && !sameDecisions(resp.Decisions, defaultpolicy.Decide(&native).Decisions) {
			t.Fatalf("case %d: decisions differ (request %x)", i, b)
		}
	}
}

// TestASPolicyRequestViews compares the SDK's views of a PolicyRequest,
// every field, with abi's decode of the same bytes: the test module
// as-policy-echo answers with its views written out (see its source), and
// policyRequestEcho writes abi's the same way. The requests fill every
// field, with strings past a one- and a two-byte length, multi-byte and
// 10-byte varints, maps, and unknown fields between known ones; then the
// same requests mangled (bytes changed, cut, added, fields moved), which
// take the SDK's whole-message decoders' way out to its field loop at
// every point. A mangled request abi refuses must be refused too.
func TestASPolicyRequestViews(t *testing.T) {
	in := newRawInstance(t, context.Background(), exampleWasm(t, "as-policy-echo"))
	r := rand.New(rand.NewPCG(9, 10))
	check := func(i int, b []byte) {
		t.Helper()
		var native abi.PolicyRequest
		nerr := native.Unmarshal(b)
		var resp abi.PolicyResponse
		if err := resp.Unmarshal(in.call(t, abi.ExportDecideRelease, b)); err != nil {
			t.Fatalf("case %d: response: %v", i, err)
		}
		if nerr != nil {
			if !strings.HasPrefix(resp.Error, "abi: malformed message: PolicyRequest: ") {
				t.Fatalf("case %d: abi: %v; AS answered %q (request %x)", i, nerr, resp.Error, b)
			}
			return
		}
		if want := policyRequestEcho(&native); resp.Error != want {
			t.Fatalf("case %d: AS views\n%s\nabi\n%s\n(request %x)", i, resp.Error, want, b)
		}
	}
	for i := range 3000 {
		b := fullPolicyRequest(r).MarshalAppend(nil)
		if i%4 == 1 {
			b = insertUnknown(r, b)
		}
		check(i, b)
		for range 1 + r.IntN(3) {
			if len(b) == 0 {
				break
			}
			switch r.IntN(4) {
			case 0:
				b[r.IntN(len(b))] = byte(r.Uint32())
			case 1:
				b = b[:r.IntN(len(b))]
			case 2:
				b = append(b, byte(r.Uint32()))
			default: // a run of bytes moved to the end: fields out of order
				at := r.IntN(len(b))
				n := r.IntN(len(b) - at + 1)
				b = append(slices.Delete(slices.Clone(b), at, at+n), b[at:at+n]...)
			}
		}
		check(i, b)
	}
}

// fullPolicyRequest is a request with every field of every view set
// (some left empty at random).
func fullPolicyRequest(r *rand.Rand) *abi.PolicyRequest {
	str := func(prefix string) string {
		switch r.IntN(8) {
		case 0:
			return ""
		case 1:
			return strings.Repeat(prefix, 1+r.IntN(60)) // past 127 bytes at times
		case 2:
			return strings.Repeat("x", 16384+r.IntN(10)) // a three-byte length
		}
		return fmt.Sprintf("%s-%d", prefix, r.IntN(1000))
	}
	num := func() uint64 {
		switch r.IntN(5) {
		case 0:
			return 0
		case 1:
			return uint64(r.IntN(128))
		case 2:
			return r.Uint64() // up to 10 bytes
		}
		return r.Uint64N(1 << (7 * uint(1+r.IntN(8)))) // 1 to 8 bytes
	}
	strMap := func() map[string]string {
		if r.IntN(2) == 0 {
			return nil
		}
		m := map[string]string{}
		for range 1 + r.IntN(3) {
			m[str("k")] = str("v")
		}
		return m
	}
	req := &abi.PolicyRequest{NowUnixMs: int64(num()), Volume: abi.VolumeView{Namespace: str("ns"), ID: str("vol"),
		PluginID: str("plugin"), AccessMode: str("am"), AttachmentMode: str("atm"), ExternalID: str("ext"), Context: strMap()}}
	for range r.IntN(6) {
		req.Claims = append(req.Claims, abi.ClaimView{AllocID: str("alloc"), NodeID: str("node"), Mode: str("mode"),
			State: str("state"), Attempts: uint32(num()), LastErrorCode: uint32(num()), LastErrorKind: str("kind"),
			ExternalNodeID: str("extnode"), AccessMode: str("am"), AttachmentMode: str("atm")})
	}
	for range r.IntN(6) {
		req.Allocs = append(req.Allocs, abi.AllocView{ID: str("alloc"), ClientStatus: str("status"), TerminalAgeMs: int64(num())})
	}
	for range r.IntN(4) {
		req.Nodes = append(req.Nodes, abi.NodeView{ID: str("node"), Status: str("status"), LastSeenAgeMs: int64(num()),
			Meta: strMap(), ExternalID: str("extid")})
	}
	return req
}

// insertUnknown puts unknown fields (appendUnknown's) at a random field
// boundary of the top-level message b.
func insertUnknown(r *rand.Rand, b []byte) []byte {
	var at []int
	for i := 0; i < len(b); {
		at = append(at, i)
		_, _, n := protowire.ConsumeField(b[i:])
		if n < 0 {
			return b
		}
		i += n
	}
	i := len(b)
	if len(at) > 0 {
		i = at[r.IntN(len(at))]
	}
	return append(appendUnknown(slices.Clone(b[:i])), b[i:]...)
}

// policyRequestEcho writes req as as-policy-echo writes its views.
func policyRequestEcho(req *abi.PolicyRequest) string {
	var sb strings.Builder
	s := func(v string) { fmt.Fprintf(&sb, "%d:%s|", len(v), v) }
	u := func(v uint64) { fmt.Fprintf(&sb, "%d|", v) }
	m := func(v map[string]string) {
		keys := slices.Sorted(maps.Keys(v))
		u(uint64(len(keys)))
		for _, k := range keys {
			s(k)
			s(v[k])
		}
	}
	u(uint64(req.NowUnixMs))
	v := req.Volume
	s(v.Namespace)
	s(v.ID)
	s(v.PluginID)
	s(v.AccessMode)
	s(v.AttachmentMode)
	s(v.ExternalID)
	m(v.Context)
	u(uint64(len(req.Claims)))
	for _, c := range req.Claims {
		s(c.AllocID)
		s(c.NodeID)
		s(c.Mode)
		s(c.State)
		u(uint64(c.Attempts))
		u(uint64(c.LastErrorCode))
		s(c.LastErrorKind)
		s(c.ExternalNodeID)
		s(c.AccessMode)
		s(c.AttachmentMode)
	}
	u(uint64(len(req.Allocs)))
	for _, a := range req.Allocs {
		s(a.ID)
		s(a.ClientStatus)
		u(uint64(a.TerminalAgeMs))
	}
	u(uint64(len(req.Nodes)))
	for _, nd := range req.Nodes {
		s(nd.ID)
		s(nd.Status)
		u(uint64(nd.LastSeenAgeMs))
		m(nd.Meta)
		s(nd.ExternalID)
	}
	return sb.String()
}
