package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// kitFolder lays out a module folder the way `module new` and `make` do:
// NAME.wasm, NAME.hcl and cases/ (the example's own cases).
func kitFolder(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join(pluginstest.RepoRoot(), "examples", "plugins", name)
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(filepath.Join(dir, "cases"), 0o755); err != nil {
		t.Fatal(err)
	}
	hcl, err := os.ReadFile(filepath.Join(src, name+".hcl"))
	if err != nil {
		t.Fatal(err)
	}
	pluginstest.Install(t, dir, name, pluginstest.Wasm(t, name), string(hcl))
	cases, _ := filepath.Glob(filepath.Join(src, "cases", "*.json"))
	for _, c := range cases {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cases", filepath.Base(c)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestModuleRunCommand(t *testing.T) {
	e := &cliEnv{t: t}
	t.Setenv("VOLHOST_WAZERO_CACHE", pluginstest.CacheDir())
	dir := kitFolder(t, "gcepd-adapter")
	wasm := filepath.Join(dir, "gcepd-adapter.wasm")

	out := e.ok("module", "run", "-view", filepath.Join(dir, "cases", "controller-unpublish.json"), wasm)
	contains(t, "module run", out, `"node_id": "projects/p/zones/z/instances/n1"`, "call adapt_request:", "memory ", "of 256 pages")

	// The host's checks: the answer is shown, and the fault it would be.
	r := e.run("module", "run", "-view", filepath.Join(dir, "cases", "meta-mismatch-unsafe.json"), wasm)
	if r.code != 1 || !strings.Contains(r.stdout, "FAULT unsafe") || !strings.Contains(r.stdout, "someone-else") {
		t.Fatalf("unsafe answer: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A bare view object (what module record writes) works too, and -json.
	bare := filepath.Join(t.TempDir(), "view.json")
	os.WriteFile(bare, []byte(`{"classify": {"step": "controller-unpublish", "code": 14}}`), 0o644)
	var res struct {
		Call   string `json:"call"`
		Answer struct {
			Outcome string `json:"outcome"`
		} `json:"answer"`
	}
	if err := json.Unmarshal([]byte(e.ok("module", "run", "-json", "-view", bare, wasm)), &res); err != nil || res.Answer.Outcome != "retry" || res.Call != "classify_error" {
		t.Fatalf("module run -json: %+v %v", res, err)
	}

	malformed := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(malformed, []byte(`{"polcy": {}}`), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{wasm}, "-view FILE is required"},
		{[]string{"-view", bare, filepath.Join(dir, "missing.wasm")}, "missing.wasm"},
		{[]string{"-view", filepath.Join(dir, "nope.json"), wasm}, "nope.json"},
		{[]string{"-view", malformed, wasm}, `unknown field "polcy"`},
		{[]string{"-view", filepath.Join(pluginstest.RepoRoot(), "examples", "plugins", "default-policy", "cases", "wait-running.json"), wasm}, "is a csi-adapter"},
	} {
		r := e.run(append([]string{"module", "run"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("module run %q: exit %d, stderr %q; want one line with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestModuleTestCommand(t *testing.T) {
	e := &cliEnv{t: t}
	t.Setenv("VOLHOST_WAZERO_CACHE", pluginstest.CacheDir())
	dir := kitFolder(t, "default-policy")

	out := e.ok("module", "test", dir)
	contains(t, "module test", out, "PASS a completed allocation's claim is released", "3 passed, 0 failed")

	out = e.ok("module", "test", "-run", "down node", filepath.Join(dir, "cases"))
	contains(t, "module test -run", out, "1 passed, 0 failed, 2 skipped")

	var rep struct {
		Passed int `json:"passed"`
		Cases  []struct {
			Name string `json:"name"`
			Pass bool   `json:"pass"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(e.ok("module", "test", "-json", dir)), &rep); err != nil || rep.Passed != 3 || len(rep.Cases) != 3 {
		t.Fatalf("module test -json: %+v %v", rep, err)
	}

	// A wrong expectation: exit 1 with a diff.
	os.WriteFile(filepath.Join(dir, "cases", "wrong.json"), []byte(`{"name": "wrong", "view": {"policy": {
		"volume": {"namespace": "default", "id": "v"},
		"claims": [{"alloc_id": "a1", "node_id": "n1", "state": "taken"}],
		"allocs": [{"id": "a1", "client_status": "running"}],
		"nodes": [{"id": "n1", "status": "ready"}]}},
		"expect": {"decisions": [{"alloc_id": "a1", "action": "release"}]}}`), 0o644)
	r := e.run("module", "test", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL wrong") || !strings.Contains(r.stdout, `decisions[0].action: want "release", got "wait"`) ||
		!strings.Contains(r.stdout, "3 passed, 1 failed") {
		t.Fatalf("wrong expectation: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A malformed case stops the run, naming the file.
	os.WriteFile(filepath.Join(dir, "cases", "zz-broken.json"), []byte(`{"view": `), 0o644)
	r = e.run("module", "test", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "zz-broken.json") {
		t.Fatalf("malformed case: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	os.Remove(filepath.Join(dir, "cases", "zz-broken.json"))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{filepath.Join(dir, "missing")}, "missing"},
		{[]string{"-run", "(", dir}, "-run"},
		{[]string{"-run", "nothing-matches", dir}, "no case matches"},
		{[]string{"-module", filepath.Join(dir, "other.wasm"), dir}, "other.wasm"},
		{[]string{filepath.Join(t.TempDir())}, "no *.json case files"},
	} {
		r := e.run(append([]string{"module", "test"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("module test %q: exit %d, stderr %q; want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestModuleNewCommand(t *testing.T) {
	e := &cliEnv{t: t}
	dir := t.TempDir()
	out := e.ok("module", "new", "-lang", "go", "-dir", dir, "-sdk", pluginstest.RepoRoot(), "mine")
	contains(t, "module new", out, filepath.Join(dir, "mine"), "make && make test")
	for _, f := range []string{"main.go", "policy.go", "mine.hcl", "Makefile", "README.md", "go.mod", "cases/hold.json"} {
		if _, err := os.Stat(filepath.Join(dir, "mine", f)); err != nil {
			t.Errorf("module new wrote no %s: %v", f, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mine"}, "-lang go|as is required"},
		{[]string{"-lang", "go", "-dir", dir, "-sdk", pluginstest.RepoRoot(), "mine"}, "already exists"},
		{[]string{"-lang", "cobol", "x"}, `-lang must be one of go (Go guest, abi/guest), as (AssemblyScript, abi/guest-as), got "cobol"`},
		{[]string{"-lang", "go"}, "not enough arguments"},
	} {
		r := e.run(append([]string{"module", "new"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("module new %q: exit %d, stderr %q; want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestModuleRecordThenRun: record a live volume's view from a running
// agent (secrets redacted), replay it offline, and the module answers as
// it would on the agent.
func TestModuleRecordThenRun(t *testing.T) {
	t.Setenv("VOLHOST_WAZERO_CACHE", pluginstest.CacheDir())
	e := moduleAgent(t, "")
	cl, err := client.New(e.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	if _, err := cl.RegisterPlugin(ctx, &structs.Plugin{ID: "csi", ControllerEndpoint: drv.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RegisterNode(ctx, &structs.Node{ID: "node1", RootDir: t.TempDir(),
		Plugins: map[string]*structs.NodePlugin{"csi": {Endpoint: drv.Endpoint()}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RegisterVolumes(ctx, []*structs.Volume{{ID: "rec", ExternalID: "disk-rec", PluginID: "csi",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
		Secrets: map[string]string{"password": "hunter2"},
		Context: map[string]string{"tier": "gold", "copied": "hunter2"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.UpsertAllocs(ctx, []*structs.Alloc{{ID: "a-rec", NodeID: "node1", ClientStatus: structs.AllocRunning}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "rec", AllocID: "a-rec", NodeID: "node1", Mode: structs.ClaimWrite}); err != nil {
		t.Fatal(err)
	}

	out := e.ok("module", "record", "rec")
	contains(t, "module record", out, `"alloc_id": "a-rec"`, `"client_status": "running"`, `"tier": "gold"`, `"copied": "<redacted>"`)
	if strings.Contains(out, "hunter2") {
		t.Fatalf("a secret in the recording:\n%s", out)
	}
	adapter := e.ok("module", "record", "-step", "controller-unpublish", "rec")
	contains(t, "module record -step", adapter, `"step": "controller-unpublish"`, `"external_id": "disk-rec"`, `"publish_unpublish": true`)

	file := filepath.Join(t.TempDir(), "rec.json")
	contains(t, "module record -o", e.ok("module", "record", "-o", file, "rec"), "Wrote "+file)
	if r := e.run("module", "record", "-o", file, "rec"); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("record over an existing file: exit %d, %q", r.code, r.stderr)
	}
	dir := kitFolder(t, "default-policy")
	run := e.ok("module", "run", "-view", file, filepath.Join(dir, "default-policy.wasm"))
	contains(t, "module run on the recording", run, `"alloc_id": "a-rec"`, `"action": "wait"`, `"reason": "allocation running"`)
	// Without an expectation the recording is not yet a case.
	os.Rename(file, filepath.Join(dir, "cases", "rec.json"))
	if r := e.run("module", "test", dir); r.code != 1 || !strings.Contains(r.stderr, `neither "expect" nor "expect_fault"`) {
		t.Fatalf("module test on a bare recording: exit %d, %q", r.code, r.stderr)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, `volume "default/nope" does not exist`},
		{[]string{"-step", "explode", "rec"}, `step: must be one of policy, node-unpublish,`},
		{[]string{"-step", "controller-unpublish", "-alloc", "a-other", "rec"}, `claim "a-other" does not exist`},
	} {
		r := e.run(append([]string{"module", "record"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("module record %q: exit %d, stderr %q; want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// TestModuleRolloutCommands: shadow an upload, see it in status, promote,
// roll back; each refusal is one line and exit 1.
func TestModuleRolloutCommands(t *testing.T) {
	dir := t.TempDir()
	pluginstest.Install(t, dir, "policy", pluginstest.Wasm(t, "default-policy"), defaultPolicyManifest)
	e := moduleAgent(t, dir)
	grace := kitFolder(t, "grace-policy")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"promote", "policy"}, "no shadow candidate"},
		{[]string{"rollback", "policy"}, "no last known good"},
		{[]string{"promote", "nope"}, `module "nope" does not exist`},
		{[]string{"shadow", "policy", filepath.Join(grace, "missing.wasm")}, "missing.wasm"},
		{[]string{"shadow", "policy", filepath.Join(grace, "grace-policy.hcl")}, "not a valid module"},
		{[]string{"shadow", "-manifest", filepath.Join(grace, "nope.hcl"), "policy", filepath.Join(grace, "grace-policy.wasm")}, "nope.hcl"},
	} {
		r := e.run(append([]string{"module"}, tc.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("module %q: exit %d, stderr %q; want one line with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	contains(t, "module shadow", e.ok("module", "shadow", "policy", filepath.Join(grace, "grace-policy.wasm")),
		"generation 2 (version 1.0.0) shadows generation 1")
	contains(t, "module status", e.ok("module", "status", "policy"), "Shadow           = generation 2 (version 1.0.0): no calls yet",
		"Breaker          = closed", "Recent Faults    = -")
	contains(t, "module promote", e.ok("module", "promote", "policy"), `Module "policy" promoted: generation 2`)
	contains(t, "module status", e.ok("module", "status", "policy"), "Promoted         = true", "Last Known Good  = generation 1")
	contains(t, "module rollback", e.ok("module", "rollback", "policy"), `Module "policy" rolled back: generation 1`)
}
