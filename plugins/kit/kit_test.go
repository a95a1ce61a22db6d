package kit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"

	"github.com/volhost/volhost/plugins/pluginstest"
)

var cacheDir = pluginstest.CacheDir()

// install writes example NAME's wasm beside its manifest (optionally
// another manifest text) in a fresh directory and returns the wasm's path.
func install(t *testing.T, name, hcl string) string {
	t.Helper()
	if hcl == "" {
		b, err := os.ReadFile(filepath.Join(pluginstest.RepoRoot(), "examples", "plugins", name, name+".hcl"))
		if err != nil {
			t.Fatal(err)
		}
		hcl = string(b)
	}
	dir := t.TempDir()
	pluginstest.Install(t, dir, name, pluginstest.Wasm(t, name), hcl)
	return filepath.Join(dir, name+".wasm")
}

func load(t *testing.T, wasm string) *Module {
	t.Helper()
	m, err := Load(context.Background(), wasm, LoadOptions{CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestExampleCases runs the cases every example module ships (make test
// runs them through this test).
func TestExampleCases(t *testing.T) {
	root := filepath.Join(pluginstest.RepoRoot(), "examples", "plugins")
	dirs, err := filepath.Glob(filepath.Join(root, "*", "cases"))
	if err != nil || len(dirs) < 5 {
		t.Fatalf("want the cases of at least 5 examples, found %v (%v)", dirs, err)
	}
	for _, dir := range dirs {
		name := filepath.Base(filepath.Dir(dir))
		t.Run(name, func(t *testing.T) {
			cases, err := LoadCases(dir)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Test(context.Background(), load(t, install(t, name, "")), cases, nil)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			rep.WriteText(&out)
			if !rep.OK() || rep.Passed != len(cases) {
				t.Fatalf("cases of %s:\n%s", name, out.String())
			}
		})
	}
}

// TestWrongExpectationDiff: a case whose expectation is wrong fails with a
// diff naming the field, the wanted and the answered value.
func TestWrongExpectationDiff(t *testing.T) {
	m := load(t, install(t, "default-policy", ""))
	c := mustCase(t, "wrong.json", `{"view": {"policy": {"now_unix_ms": 1,
		"volume": {"namespace": "default", "id": "v"},
		"claims": [{"alloc_id": "a1", "node_id": "n1", "state": "taken"}],
		"allocs": [{"id": "a1", "client_status": "running"}],
		"nodes": [{"id": "n1", "status": "ready"}]}},
		"expect": {"decisions": [{"alloc_id": "a1", "action": "release"}]}}`)
	rep, err := Test(context.Background(), m, []*Case{c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Failed != 1 {
		t.Fatalf("report %+v: want one failure", rep)
	}
	want := `decisions[0].action: want "release", got "wait"`
	if d := rep.Cases[0].Diff; len(d) != 1 || d[0] != want {
		t.Fatalf("diff %q, want [%q]", d, want)
	}
	var out bytes.Buffer
	rep.WriteText(&out)
	if !strings.Contains(out.String(), "FAIL wrong") || !strings.Contains(out.String(), "0 passed, 1 failed") {
		t.Fatalf("text report:\n%s", out.String())
	}
}

// TestRunFilter: -run selects cases by name; the others are skipped.
func TestRunFilter(t *testing.T) {
	dir := filepath.Join(pluginstest.RepoRoot(), "examples", "plugins", "default-policy", "cases")
	cases, err := LoadCases(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Test(context.Background(), load(t, install(t, "default-policy", "")), cases, regexp.MustCompile("running"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed != 1 || rep.Skipped != len(cases)-1 || rep.Cases[0].Name != "a running allocation's claim waits" {
		t.Fatalf("report %+v", rep)
	}
}

// TestTrappingModule: a trap is reported as the trap fault; a case
// expecting an answer fails, one expecting the trap passes.
func TestTrappingModule(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(pluginstest.RepoRoot(), pluginstest.TestModules, "fault-policy", "variants", "fault-trap.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	m := load(t, install(t, "fault-policy", string(src)))
	cases, err := LoadCases("testdata/cases-fault")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Test(context.Background(), m, cases, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed != 1 || rep.Failed != 1 {
		t.Fatalf("report %+v", rep)
	}
	for _, c := range rep.Cases {
		switch c.Name {
		case "a trap, expected":
			if !c.Pass {
				t.Errorf("%s: %q", c.Name, c.Diff)
			}
		default:
			if c.Pass || c.Result.Fault == nil || c.Result.Fault.Kind != "trap" || !strings.Contains(c.Diff[0], `got fault "trap"`) {
				t.Errorf("%s: pass %v, diff %q, result %+v", c.Name, c.Pass, c.Diff, c.Result)
			}
		}
	}
}

// TestHostChecks: answers the watcher would refuse are shown as the fault
// it would record, though the module answered.
func TestHostChecks(t *testing.T) {
	m := load(t, install(t, "gcepd-adapter", ""))
	b, err := os.ReadFile(filepath.Join(pluginstest.RepoRoot(), "examples", "plugins", "gcepd-adapter", "cases", "meta-mismatch-unsafe.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := mustCase(t, "x.json", string(b))
	res, err := m.Run(context.Background(), &c.View)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fault == nil || res.Fault.Kind != FaultUnsafe || !strings.Contains(res.Fault.Message, "someone-else") || res.Answer == nil {
		t.Fatalf("result %+v: want the answer and an unsafe fault naming the instance", res)
	}
	if res.MemoryLimitPages != 256 || res.MemoryPages == 0 || res.Duration <= 0 {
		t.Fatalf("result %+v: want the call's memory and time", res)
	}
	// A policy view is refused for an adapter, before any call.
	pc := mustCase(t, "p.json", `{"view": {"policy": {"volume": {"namespace": "a", "id": "b"}}}, "expect": {}}`)
	if _, err := m.Run(context.Background(), &pc.View); err == nil || !strings.Contains(err.Error(), "is a csi-adapter") {
		t.Fatalf("policy view on an adapter: %v", err)
	}
}

func TestUnsafePolicyCheck(t *testing.T) {
	for _, tc := range []struct {
		name, decisions, want string
	}{
		{"release running", `[{"alloc_id":"a1","action":1}]`, `allocation "a1", which is running`},
		{"skip ready node", `[{"alloc_id":"a2","action":3}]`, `node "n1", which is ready`},
		{"wait running", `[{"alloc_id":"a1","action":2}]`, ""},
		{"release done", `[{"alloc_id":"a2","action":1}]`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCase(t, "v.json", `{"view": {"policy": {"volume": {"namespace": "a", "id": "b"},
				"claims": [{"alloc_id": "a1", "node_id": "n1"}, {"alloc_id": "a2", "node_id": "n1"}],
				"allocs": [{"id": "a1", "client_status": "running"}, {"id": "a2", "client_status": "complete"}],
				"nodes": [{"id": "n1", "status": "ready"}]}}, "expect": {}}`)
			req := c.View.Policy.Request()
			pr := policyResponse(t, tc.decisions)
			err := checkPolicy(req, pr)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var hf *hostFault
			if !errors.As(err, &hf) || hf.kind != FaultUnsafe || !strings.Contains(hf.msg, tc.want) {
				t.Fatalf("got %v, want unsafe %q", err, tc.want)
			}
		})
	}
}

func TestParseCaseErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"syntax", "{\n  \"view\": {,\n}", "line 2"},
		{"unknown field", `{"view": {"policy": {}}, "expect": {}, "expected": {}}`, `unknown field "expected"`},
		{"no view", `{"expect": {}}`, `none of "policy", "adapter" or "classify"`},
		{"two views", `{"view": {"policy": {}, "classify": {}}, "expect": {}}`, "a view makes one call"},
		{"no expectation", `{"view": {"policy": {}}}`, `neither "expect" nor "expect_fault"`},
		{"both", `{"view": {"policy": {}}, "expect": {}, "expect_fault": "trap"}`, "both"},
		{"typo in expect", `{"view": {"policy": {}}, "expect": {"decision": []}}`, `names "decision"`},
		{"typo in decision", `{"view": {"policy": {}}, "expect": {"decisions": [{"allocid": "x"}]}}`, `names "allocid"`},
		{"two values", `{"view": {"policy": {}}, "expect": {}} {}`, "one case per file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCase("c.json", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "c.json") {
				t.Fatalf("got %v, want an error naming c.json and %q", err, tc.want)
			}
		})
	}
}

func TestLoadCasesErrors(t *testing.T) {
	if _, err := LoadCases("testdata/nope"); err == nil {
		t.Fatal("missing directory accepted")
	}
	if _, err := LoadCases(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no *.json case files") {
		t.Fatalf("empty directory: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "good.json"), []byte(`{"view": {"policy": {}}, "expect": {}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{`), 0o644)
	if _, err := LoadCases(dir); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Fatalf("malformed case: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(context.Background(), "testdata/missing.wasm", LoadOptions{}); err == nil || !strings.Contains(err.Error(), "missing.wasm") {
		t.Fatalf("missing module: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x.wasm"), []byte("not wasm"), 0o644)
	if _, err := Load(context.Background(), filepath.Join(dir, "x.wasm"), LoadOptions{}); err == nil || !strings.Contains(err.Error(), "x.hcl") {
		t.Fatalf("missing manifest: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "x.hcl"), []byte(`kind = "release-policy"`), 0o644)
	_, err := Load(context.Background(), filepath.Join(dir, "x.wasm"), LoadOptions{})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("garbage module: %v, want a refusal", err)
	}
}

func TestMatch(t *testing.T) {
	got := &Answer{Decisions: []DecisionJSON{{AllocID: "a", Action: "wait", RetryAfterMs: 5}}, Reason: ""}
	for _, tc := range []struct {
		expect string
		diffs  int
	}{
		{`{}`, 0},
		{`{"decisions": [{"alloc_id": "a"}]}`, 0},
		{`{"decisions": [{"alloc_id": "a", "retry_after_ms": 5, "reason": ""}]}`, 0},
		{`{"decisions": [{"alloc_id": "a", "retry_after_ms": 6}]}`, 1},
		{`{"decisions": []}`, 1},
		{`{"decisions": [{"alloc_id": "a"}, {"alloc_id": "b"}]}`, 1},
		{`{"outcome": "retry"}`, 1},
		{`{"volume_context": {}}`, 0},
	} {
		if d := Match(json.RawMessage(tc.expect), got); len(d) != tc.diffs {
			t.Errorf("Match(%s): %q, want %d differences", tc.expect, d, tc.diffs)
		}
	}
}

func mustCase(t *testing.T, name, src string) *Case {
	t.Helper()
	c, err := ParseCase(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func policyResponse(t *testing.T, decisions string) *abi.PolicyResponse {
	t.Helper()
	var ds []struct {
		AllocID string `json:"alloc_id"`
		Action  uint32 `json:"action"`
	}
	if err := json.Unmarshal([]byte(decisions), &ds); err != nil {
		t.Fatal(err)
	}
	resp := &abi.PolicyResponse{}
	for _, d := range ds {
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: d.AllocID, Action: abi.Action(d.Action)})
	}
	return resp
}

// TestAdapterCheckIsTheHosts: the kit judges an adapter's answer as the
// host does (abi.CheckAdapterIDs, whose table is beside it): here only
// how its refusals are named. At release, the node's current ID where the
// claim recorded another is unsafe, as the host records it.
func TestAdapterCheckIsTheHosts(t *testing.T) {
	req := &abi.AdapterRequest{Step: abi.StepControllerUnpublish,
		Volume: abi.VolumeView{Namespace: "a", ID: "b", ExternalID: "disk-1"},
		Claim:  abi.ClaimView{AllocID: "a1", NodeID: "n1", ExternalNodeID: "ext-recorded"},
		Node:   abi.NodeView{ID: "n1", ExternalID: "ext-current"}}
	for _, tc := range []struct {
		name, volumeID, nodeID string
		kind                   string // "": accepted
		want                   string
	}{
		{"recorded node", "disk-1", "ext-recorded", "", ""},
		{"current node, not recorded", "disk-1", "ext-current", FaultUnsafe, `whose external node ID is "ext-recorded" (recorded on the claim at publish)`},
		{"another disk", "disk-2", "ext-recorded", FaultUnsafe, `whose external ID is "disk-1"`},
		{"no volume ID", "", "ext-recorded", FaultBadOutput, "empty volume ID"},
		{"no node ID", "disk-1", "", FaultBadOutput, "empty node ID for controller-unpublish"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkAdapter(req, &abi.AdapterResponse{VolumeID: tc.volumeID, NodeID: tc.nodeID})
			if tc.kind == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var hf *hostFault
			if !errors.As(err, &hf) || hf.kind != tc.kind || !strings.Contains(hf.msg, tc.want) {
				t.Fatalf("got %v, want %s %q", err, tc.kind, tc.want)
			}
		})
	}
}
