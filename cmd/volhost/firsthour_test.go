package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// writeFile writes a spec into a temporary directory and returns its path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// An endpoint in the wrong form is a 400 naming the rule, at plugin and
// node registration alike; an endpoint nobody listens on names the dial
// error (the CLI runs on the agent's host). Nothing is registered.
func TestRegisterEndpointErrors(t *testing.T) {
	a := devAgent(t)
	e := &cliEnv{t: t, addr: "http://" + a.HTTPAddr()}
	missing := "unix://" + filepath.Join(t.TempDir(), "missing.sock")
	for _, c := range []struct{ endpoint, want string }{
		{"/run/csi/demo.sock", "(no scheme): want unix:///absolute/path/to.sock or tcp://host:port"},
		{"127.0.0.1:9000", "(no scheme): want unix:///"},
		{"foo://bar", "(scheme foo is neither unix nor tcp): want unix:///"},
		{"unix://relative.sock", "three slashes, unix:///relative.sock"},
		{missing, "no such file or directory"},
	} {
		plugin := writeFile(t, "plugin.hcl", `plugin "p" { controller_endpoint = "`+c.endpoint+`" }`)
		r := e.run("plugin", "register", plugin)
		if r.code != 1 || !strings.Contains(r.stderr, "controller_endpoint") || !strings.Contains(r.stderr, c.want) {
			t.Errorf("plugin register %s: exit %d, stderr %q, want %q", c.endpoint, r.code, r.stderr, c.want)
		}
		if strings.Contains(r.stderr, "endpoint unreachable") {
			t.Errorf("plugin register %s hides the reason: %q", c.endpoint, r.stderr)
		}
		node := writeFile(t, "node.hcl", `node "n1" {
  plugin "p" { endpoint = "`+c.endpoint+`" }
}`)
		r = e.run("node", "register", node)
		if r.code != 1 || !strings.Contains(r.stderr, "plugins.p.endpoint") || !strings.Contains(r.stderr, c.want) {
			t.Errorf("node register %s: exit %d, stderr %q, want %q", c.endpoint, r.code, r.stderr, c.want)
		}
	}
	if out := e.ok("plugin", "status"); strings.Contains(out, " p ") {
		t.Errorf("a refused plugin was registered:\n%s", out)
	}
	if out := e.ok("node", "status"); strings.Contains(out, "n1") {
		t.Errorf("a refused node was registered:\n%s", out)
	}
}

// aclEnv is a CLI pointed at an API with ACLs on and bootstrapped; it
// returns the management secret.
func aclEnv(t *testing.T) (*cliEnv, string) {
	t.Helper()
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{Audit: b}, b.Store, b, nil)
	s.EnableACL(api.ACLConfig{Service: acl.NewService(b.Store, b, nil), Audit: b})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	e := &cliEnv{t: t, backend: b, addr: ts.URL}
	var boot api.ACLTokenSecret
	if err := json.Unmarshal([]byte(e.ok("acl", "bootstrap", "-json")), &boot); err != nil {
		t.Fatal(err)
	}
	return e, boot.SecretID
}

// With ACLs on and no token, the CLI says no token was sent and how to
// send one, in its own flags; never an HTTP header or query parameter.
func TestDeniedWithoutToken(t *testing.T) {
	e, mgmt := aclEnv(t)
	r := e.run("volume", "status")
	want := "Error: Permission denied: missing capability namespace:read on every namespace (pass -namespace=<ns> to ask for one); no ACL token was sent: pass -token=<secret> or set VOLHOST_TOKEN\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("volume status without a token: exit %d\n got %q\nwant %q", r.code, r.stderr, want)
	}
	r = e.run("node", "status")
	if r.code != 1 || !strings.Contains(r.stderr, "no ACL token was sent: pass -token=<secret> or set VOLHOST_TOKEN") {
		t.Errorf("node status without a token: exit %d %q", r.code, r.stderr)
	}
	for _, hint := range []string{"?namespace", "X-Volhost-Token", "header"} {
		if strings.Contains(r.stderr, hint) {
			t.Errorf("CLI error suggests HTTP (%q): %q", hint, r.stderr)
		}
	}
	// A token that is sent but lacks the capability is not told to send one.
	r = e.run("volume", "status", "-token", "00000000-0000-0000-0000-000000000000")
	if r.code != 1 || strings.Contains(r.stderr, "no ACL token was sent") {
		t.Errorf("with a token: exit %d %q", r.code, r.stderr)
	}
	e.ok("volume", "status", "-token", mgmt)
}

// A misspelt spec argument is named with the suggestion HCL makes, not
// hidden behind the "Missing required argument" it also causes.
func TestSpecTypoSuggests(t *testing.T) {
	e := newCLIEnv(t)
	e.ok("plugin", "register", "testdata/plugin.hcl")
	spec := writeFile(t, "volume.hcl", `volume "vol1" {
  external_id     = "disk-1"
  plugin_id       = "gce-pd"
  acess_mode      = "single-node-writer"
  attachment_mode = "file-system"
}
`)
	r := e.run("volume", "register", spec)
	want := spec + `:4: Unsupported argument: An argument named "acess_mode" is not expected here. Did you mean "access_mode"? (and 1 more error(s))`
	if r.code != 1 || r.stderr != "Error: "+want+"\n" {
		t.Errorf("exit %d\n got %q\nwant %q", r.code, r.stderr, "Error: "+want+"\n")
	}
}

// An unknown command is an error line with the nearest command, exit 1,
// at the top level and in a group; not the usage alone.
func TestUnknownCommandSuggests(t *testing.T) {
	e := newCLIEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"volum", "status"}, `Error: unknown command "volum"; did you mean "volume"? (run "volhost -help" for the list)` + "\n"},
		{[]string{"volume", "stauts"}, `Error: unknown command "volume stauts"; did you mean "volume status"? (run "volhost volume -help" for the list)` + "\n"},
		{[]string{"frobnicate"}, `Error: unknown command "frobnicate"; run "volhost -help" for the list` + "\n"},
	} {
		r := e.run(c.args...)
		if r.code != 1 || r.stderr != c.want || r.stdout != "" {
			t.Errorf("volhost %s: exit %d, stdout %q\n got %q\nwant %q", strings.Join(c.args, " "), r.code, r.stdout, r.stderr, c.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"volum", "volume", 1}, {"stauts", "status", 2}, {"abc", "", 3}, {"node", "nodes", 1}, {"kitten", "sitting", 3}} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// `volhost version` prints what -version prints, with the version.
func TestVersionCommand(t *testing.T) {
	e := newCLIEnv(t)
	out := e.ok("version")
	if !strings.HasPrefix(out, "volhost v"+Version+" ") {
		t.Errorf("version: %q", out)
	}
	if r := e.run("-version"); r.code != 0 || r.stdout != out {
		t.Errorf("-version: exit %d %q, want %q", r.code, r.stdout, out)
	}
}

// `agent -help` lists its flags as every other command does.
func TestAgentHelpLayout(t *testing.T) {
	e := newCLIEnv(t)
	r := e.run("agent", "-help")
	if r.code != 0 {
		t.Fatalf("exit %d %s", r.code, r.stderr)
	}
	contains(t, "agent -help", r.stdout, "Usage: volhost agent [options]",
		"\n  -data-dir=<dir>\n    directory for the raft log and snapshots\n", "\n  -dev\n    keep all state", "\n  -log-level=<level>\n")
	if strings.Contains(r.stdout, "\t") || strings.Contains(r.stdout, "  -data-dir dir") {
		t.Errorf("agent -help uses the flag package's layout:\n%s", r.stdout)
	}
	if r := e.run("agent", "-bogus"); r.code != 1 || r.stderr != "Error: flag provided but not defined: -bogus (see volhost agent -help)\n" {
		t.Errorf("agent -bogus: exit %d %q", r.code, r.stderr)
	}
}

// VOLHOST_NAMESPACE is -namespace's default; the flag wins over it.
func TestNamespaceEnv(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	e.ok("volume", "register", "testdata/volumes.json") // vol2 in default, vol3 in prod
	e.env = map[string]string{"VOLHOST_NAMESPACE": "prod"}
	list := e.ok("volume", "status")
	if !strings.Contains(list, "vol3") || strings.Contains(list, "vol1") {
		t.Errorf("volume status with VOLHOST_NAMESPACE=prod:\n%s", list)
	}
	contains(t, "volume status vol3", e.ok("volume", "status", "vol3"), "Namespace        = prod")
	contains(t, "-namespace wins", e.ok("volume", "status", "-namespace", "default", "vol1"), "Namespace        = default")
	if r := e.run("volume", "status", "vol1"); r.code != 1 || !strings.Contains(r.stderr, `"prod/vol1" does not exist`) {
		t.Errorf("vol1 in prod: exit %d %q", r.code, r.stderr)
	}
	// events lists every namespace without -volume, whatever the variable says.
	e.ok("events")
}

// volume status takes the list filters the API and the UI have.
func TestVolumeStatusFilters(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	e.ok("volume", "register", "testdata/volumes.json")
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	if err := e.backend.Stick("prod", "vol3", &structs.Stuck{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	ids := func(args ...string) string {
		t.Helper()
		var vols []*structs.Volume
		if err := json.Unmarshal([]byte(e.ok(append([]string{"volume", "status", "-json"}, args...)...)), &vols); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vols {
			out = append(out, v.ID)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "vol1,vol2,vol3"},
		{[]string{"-stuck"}, "vol3"},
		{[]string{"-stuck=false"}, "vol1,vol2"},
		{[]string{"-claim-state", "taken"}, "vol1"},
		{[]string{"-claim-state=unclaimed"}, "vol2,vol3"},
		{[]string{"-claim-state=unclaimed", "-stuck=false"}, "vol2"},
		{[]string{"-search", "vol2"}, "vol2"},
	} {
		if got := ids(c.args...); got != c.want {
			t.Errorf("volume status %v: %s, want %s", c.args, got, c.want)
		}
	}
	if out := e.ok("volume", "status", "-claim-state=ready-to-free"); out != "No volumes match\n" {
		t.Errorf("no match: %q", out)
	}
	r := e.run("volume", "status", "-claim-state", "gone")
	if r.code != 1 || !strings.Contains(r.stderr, `-claim-state must be one of`) || !strings.Contains(r.stderr, "unclaimed") {
		t.Errorf("bad -claim-state: exit %d %q", r.code, r.stderr)
	}
	if r := e.run("volume", "status", "-stuck", "vol1"); r.code != 1 || !strings.Contains(r.stderr, "give them without an ID") {
		t.Errorf("filter with an ID: exit %d %q", r.code, r.stderr)
	}
}

// A claim with a last error and a hold (a failed attempt, then its node
// went gone) shows the hold: what it waits for now, and its remedy.
func TestHoldWinsOverStaleError(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	e.ok("alloc", "update", "-status", "complete", "web-1")
	past := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &structs.Claim{AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite, State: structs.ClaimTaken,
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem, Attempts: 2, NextAttempt: past,
		LastError: &structs.ClaimError{Kind: structs.ErrorCSI, Step: "node-unpublish", Message: "node node1 is not connected to this server (node ready)"},
		Hold:      &structs.ClaimHold{Module: "volhost", Reason: "node node1 is gone: run volhost node fence", Since: past}}
	if err := e.backend.Checkpoint("default", "vol1", c); err != nil {
		t.Fatal(err)
	}
	out := e.ok("volume", "status", "vol1")
	contains(t, "held claim", out, "when it changes  held by volhost: node node1 is gone: run volhost node fence (before: attempt 2 failed:")
	if strings.Contains(out, fmtTime(past)) {
		t.Errorf("shows the stale next attempt:\n%s", out)
	}
}

// node deregister and plugin deregister: refused while in use, naming
// what uses them, state untouched; -force lets a node go with claims of
// ended allocations, listing them; each success is audited.
func TestNodeAndPluginDeregister(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	fail := func(want string, args ...string) {
		t.Helper()
		before, err := e.backend.Store.Digest()
		if err != nil {
			t.Fatal(err)
		}
		r := e.run(args...)
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("volhost %s: exit %d %q, want %q", strings.Join(args, " "), r.code, r.stderr, want)
		}
		if after, _ := e.backend.Store.Digest(); after != before {
			t.Errorf("volhost %s: a refusal changed the state", strings.Join(args, " "))
		}
	}
	fail(`plugin "gce-pd" is used by 1 volume(s): default/vol1; deregister them first`, "plugin", "deregister", "gce-pd")
	fail(`node "node1" has live allocation(s): web-1; they must end first`, "node", "deregister", "node1")
	fail(`node "node1" has live allocation(s): web-1`, "node", "deregister", "-force", "node1")
	fail(`node "nope" does not exist`, "node", "deregister", "nope")
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	e.ok("alloc", "update", "-status", "complete", "web-1")
	fail(`node "node1" still has 1 claim(s) to release: default/vol1 (alloc web-1, taken); wait for their release, or force`, "node", "deregister", "node1")

	out := e.ok("node", "deregister", "-force", "node1")
	contains(t, "node deregister -force", out, `Deregistered node "node1"`,
		"1 claim(s) will skip their node steps", "default    vol1    web-1     taken")
	if r := e.run("node", "status", "node1"); r.code != 1 {
		t.Errorf("node status after deregister: exit %d %s", r.code, r.stdout)
	}
	e.ok("volume", "deregister", "-force", "vol1")
	contains(t, "plugin deregister", e.ok("plugin", "deregister", "gce-pd"), `Deregistered plugin "gce-pd"`)
	if out := e.ok("plugin", "status"); strings.Contains(out, "gce-pd") {
		t.Errorf("plugin still listed:\n%s", out)
	}
	audit := e.ok("events", "-type", "audit")
	contains(t, "audit trail", audit, "DELETE /v1/node/node1", "DELETE /v1/plugin/gce-pd", "DELETE /v1/volume/vol1")
}

// A shadow candidate whose manifest changes what the module selects (the
// scaffold's manifest has no default = true) is shown as a diff at shadow
// time, and promote refuses it, naming the change, unless allowed.
func TestShadowSelectionChange(t *testing.T) {
	dir := t.TempDir()
	pluginstest.Install(t, dir, "policy", pluginstest.Wasm(t, "default-policy"), defaultPolicyManifest)
	e := moduleAgent(t, dir)
	wasm := filepath.Join(t.TempDir(), "x.wasm")
	if err := os.WriteFile(wasm, pluginstest.Wasm(t, "default-policy"), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := writeFile(t, "x.hcl", "kind = \"release-policy\"\nversion = \"0.1.0\"\nlimits {\n  pool_size = 2\n}\n")
	out := e.ok("module", "shadow", "-manifest", manifest, "policy", wasm)
	contains(t, "module shadow", out, "Its manifest differs from the serving one:",
		"  default: true -> false   (selection: module promote refuses it without -allow-selection-change)",
		"  version: 1.0.0 -> 0.1.0\n", "  limits.pool_size: 1 -> 2\n")
	contains(t, "module status", e.ok("module", "status", "policy"),
		"Shadow Manifest  = default: true -> false (selection)", "version: 1.0.0 -> 0.1.0")
	r := e.run("module", "promote", "policy")
	want := "Error: module policy: promoting would change which volumes the module judges: default: true -> false; promote with -allow-selection-change if that is meant\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("promote: exit %d\n got %q\nwant %q", r.code, r.stderr, want)
	}
	contains(t, "still serving", e.ok("module", "status", "policy"), "Selects          = default")

	// module discard drops the candidate; the serving generation is untouched.
	contains(t, "module discard", e.ok("module", "discard", "policy"), `Module "policy": shadow candidate discarded; generation 1 (version 1.0.0) serves`)
	contains(t, "after discard", e.ok("module", "status", "policy"), "Shadow           = -", "discarded by the operator")
	if r := e.run("module", "discard", "policy"); r.code != 1 || !strings.Contains(r.stderr, "no shadow candidate to discard") {
		t.Errorf("second discard: exit %d %q", r.code, r.stderr)
	}
	if r := e.run("module", "promote", "policy"); r.code != 1 || !strings.Contains(r.stderr, "no shadow candidate") {
		t.Errorf("promote after discard: exit %d %q", r.code, r.stderr)
	}
	e.ok("module", "shadow", "-manifest", manifest, "policy", wasm)
	contains(t, "promote allowed", e.ok("module", "promote", "-allow-selection-change", "policy"), `Module "policy" promoted: generation 3 (version 0.1.0)`)
}

// module new's Makefile runs the volhost that made it (make test exited
// 127 without volhost on PATH), and its README records a case with -o and
// -namespace (NAMESPACE/VOLUME doubled the namespace).
func TestModuleNewMakefileAndREADME(t *testing.T) {
	e := &cliEnv{t: t}
	dir := t.TempDir()
	e.ok("module", "new", "-lang", "go", "-dir", dir, "-sdk", pluginstest.RepoRoot(), "mine")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(dir, "mine", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "Makefile", string(mk), "VOLHOST ?= "+self+"\n", "$(VOLHOST) module test .")
	readme, err := os.ReadFile(filepath.Join(dir, "mine", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "README", string(readme), "volhost module record [-namespace NAMESPACE] -o cases/NAME.json VOLUME")
	if strings.Contains(string(readme), "NAMESPACE/VOLUME") {
		t.Errorf("README records NAMESPACE/VOLUME:\n%s", readme)
	}
}

// A module that reports another version than its manifest says is shown
// with both, not as the manifest's alone.
func TestModuleReportedVersion(t *testing.T) {
	dir := t.TempDir()
	pluginstest.Install(t, dir, "policy", pluginstest.Wasm(t, "default-policy"),
		strings.Replace(defaultPolicyManifest, `version = "1.0.0"`, `version = "2.0.0"`, 1))
	e := moduleAgent(t, dir)
	contains(t, "module status", e.ok("module", "status", "policy"),
		"Version          = 2.0.0 (from the manifest; the module itself reports 1.0.0)")
	var st map[string]any
	if err := json.Unmarshal([]byte(e.ok("module", "status", "-json", "policy")), &st); err != nil {
		t.Fatal(err)
	}
	if st["version"] != "2.0.0" || st["reported_version"] != "1.0.0" {
		t.Errorf("module status -json: version %v, reported_version %v", st["version"], st["reported_version"])
	}
}
