package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/test/peers/internal/fault"
)

var bins Bins

// TestMain builds volhost and the drivers once (or takes them from
// $VOLHOST_E2E_BIN_DIR) for every test of the package.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vh-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	bins, err = Build(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// defaultPlugin is the plugin ID the tests register the driver under.
const defaultPlugin = "gce-pd"

// defaultWatcher is the agent's watcher block for the tests: quick retries
// so a test with transient faults ends in seconds.
const defaultWatcher = `
watcher {
  backoff_base = "50ms"
  backoff_max  = "400ms"
  csi_timeout  = "30s"
}
`

// env is one test's world: a GCE PD driver process, a volhost agent process,
// and helpers that go through the CLI.
type env struct {
	t      *testing.T
	ctx    context.Context
	dir    string
	drv    *GCEPD
	agent  *Agent
	plugin string
	// nodeRPC is the server's node_rpc address (agentNodes only).
	nodeRPC string
	mgmt    string // the management token when ACL is on
	// agentCfg is the agent's configuration; opts the env's options.
	agentCfg string
	opts     envOptions
}

type envOptions struct {
	nodes   []string
	disks   int
	watcher string // HCL watcher block; defaultWatcher when empty
	plugin  string // plugin ID; defaultPlugin when empty
	// nodeMeta, when set, registers the nodes without a node endpoint and
	// with this metadata (the adapter module then names them).
	nodeMeta  map[string]string
	agentArgs []string
	// agentNodes are served by the driver but registered by node agents
	// (the test starts them); the server then listens on node_rpc.
	agentNodes []string
	// extra is more agent configuration (a scheduler block).
	extra string
	// deferAgent: the test starts the agent with e.startAgent (after
	// what its configuration names, e.g. a Nomad agent's address).
	deferAgent bool
	// timeout bounds the whole test (default 3 minutes).
	timeout time.Duration
	// acl turns ACL enforcement on: the env bootstraps it and runs the CLI
	// (and API client) with the management token, env.mgmt.
	acl bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	t.Cleanup(cancel)
	if len(o.nodes) == 0 && len(o.agentNodes) == 0 {
		o.nodes = []string{"node1"}
	}
	if o.disks == 0 {
		o.disks = 4
	}
	if o.watcher == "" {
		o.watcher = defaultWatcher
	}
	if o.plugin == "" {
		o.plugin = defaultPlugin
	}
	dir := t.TempDir()
	// Unix socket paths are limited to ~100 bytes; t.TempDir can be longer.
	sock, err := os.MkdirTemp("", "vh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })

	drv, err := StartGCEPD(ctx, sock, dir, bins.Gcepd, GCEPDOptions{
		Nodes: append(slices.Clone(o.nodes), o.agentNodes...), Disks: o.disks, BackoffInitial: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Verbosity: "4",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		drv.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("gcepd log tail:\n%s", drv.Tail(6000))
		}
	})
	agentCfg := "log_level = \"debug\"\n" + o.watcher + o.extra
	if o.acl {
		agentCfg += "acl {\n  enabled = true\n}\n"
	}
	var nodeRPC string
	if len(o.agentNodes) > 0 {
		if nodeRPC, err = FreeAddr(); err != nil {
			t.Fatal(err)
		}
		// Short heartbeats so a lost node is down within seconds.
		agentCfg += fmt.Sprintf("node_rpc {\n  address = %q\n  heartbeat_interval = \"500ms\"\n  heartbeat_ttl = \"3s\"\n}\n", nodeRPC)
	}
	e := &env{t: t, ctx: ctx, dir: dir, drv: drv, plugin: o.plugin, nodeRPC: nodeRPC, agentCfg: agentCfg, opts: o}
	if !o.deferAgent {
		e.startAgent(agentCfg)
	}
	return e
}

// startAgent starts the volhost agent with config, then registers the
// plugin and the nodes (newEnv does it unless deferAgent).
func (e *env) startAgent(agentCfg string) {
	t, ctx, dir, o := e.t, e.ctx, e.dir, e.opts
	t.Helper()
	agent, err := StartAgent(ctx, dir, bins.Volhost, agentCfg, o.agentArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		agent.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("agent log tail:\n%s", agent.Tail(8000))
		}
	})
	e.agent = agent
	if o.acl {
		if e.mgmt, err = agent.API.Bootstrap(ctx); err != nil {
			t.Fatalf("ACL bootstrap: %v", err)
		}
		agent.API.Token = e.mgmt
		t.Setenv("VOLHOST_TOKEN", e.mgmt) // the CLI's token (Agent.CLI passes the environment on)
	}
	e.registerPluginAndNodes(o.nodes, o.nodeMeta)
}

// cli runs the volhost CLI and fails the test unless the exit code is want.
func (e *env) cli(want int, args ...string) string {
	e.t.Helper()
	out, code, err := e.agent.CLI(e.ctx, args...)
	if err != nil {
		e.t.Fatalf("volhost %s: %v", strings.Join(args, " "), err)
	}
	if code != want {
		e.t.Fatalf("volhost %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}

// spec writes a spec file for the CLI into the env's directory.
func (e *env) spec(name, body string) string {
	e.t.Helper()
	return writeSpec(e.t, e.dir, name, body)
}

func (e *env) registerPluginAndNodes(nodes []string, meta map[string]string) {
	e.t.Helper()
	out := e.cli(0, "plugin", "register", e.spec("plugin.hcl", fmt.Sprintf(`
plugin %q {
  controller_endpoint = %q
}
`, e.plugin, Endpoint(e.drv.Controller))))
	mustContain(e.t, "plugin register", out, "controller publish/unpublish: true")
	for _, n := range nodes {
		if meta != nil {
			var kv []string
			for k, v := range meta {
				kv = append(kv, fmt.Sprintf("%q = %q", k, strings.ReplaceAll(v, "{node}", n)))
			}
			slices.Sort(kv)
			e.cli(0, "node", "register", e.spec(n+".hcl", fmt.Sprintf(`
node %q {
  status   = "ready"
  root_dir = %q
  meta     = { %s }
}
`, n, filepath.Join(e.dir, "root-"+n), strings.Join(kv, ", "))))
			continue
		}
		e.cli(0, "node", "register", e.spec(n+".hcl", fmt.Sprintf(`
node %q {
  status   = "ready"
  root_dir = %q
  plugin %q {
    endpoint = %q
  }
}
`, n, filepath.Join(e.dir, "root-"+n), e.plugin, Endpoint(e.drv.Nodes[n]))))
		// NodeGetInfo on the real driver gave the node its GCE instance ID.
		mustContain(e.t, "node status", e.cli(0, "node", "status", n), e.drv.NodeID(n))
	}
}

// volume registers a single-writer volume on a driver disk.
func (e *env) volume(vol, disk string) {
	e.t.Helper()
	e.cli(0, "volume", "register", e.spec(vol+".hcl", fmt.Sprintf(`
volume %q {
  external_id     = %q
  plugin_id       = %q
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
  fs_type         = "ext4"
}
`, vol, e.drv.VolumeID(disk), e.plugin)))
}

// claim registers volume vol on disk, and a running alloc on node, and
// claims the volume for it through the CLI.
func (e *env) claim(vol, disk, alloc, node string) {
	e.t.Helper()
	e.volume(vol, disk)
	e.cli(0, "alloc", "register", e.spec(alloc+".hcl", fmt.Sprintf(`
alloc %q {
  node_id       = %q
  job_id        = "job-%s"
  client_status = "running"
}
`, alloc, node, alloc)))
	e.cli(0, "volume", "claim", "-alloc", alloc, "-node", node, "-mode", "write", vol)
}

// calls returns the driver's finished calls of the volume-level methods
// (identity and capability calls left out), as "service:method:code".
func (e *env) calls() []string {
	e.t.Helper()
	r, err := e.drv.Control.Calls(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, c := range r.Calls {
		if c.VolumeID == "" {
			continue
		}
		out = append(out, c.Service+":"+c.Method+":"+c.Code)
	}
	return out
}

func (e *env) attached(disk, node string) bool {
	e.t.Helper()
	on, err := e.drv.Control.Attached(e.ctx, disk, node)
	if err != nil {
		e.t.Fatal(err)
	}
	return on
}

func (e *env) waitReleased(vol string) *Volume {
	e.t.Helper()
	v, err := e.agent.API.WaitVolume(e.ctx, vol, func(v *Volume) bool { return len(v.Claims) == 0 })
	if err != nil {
		e.t.Fatalf("waiting for %s to be released: %v (last read %+v)", vol, err, v)
	}
	return v
}

func (e *env) waitStarted(method string) {
	e.t.Helper()
	err := Poll(e.ctx, 10*time.Millisecond, func() (bool, error) {
		r, err := e.drv.Control.Calls(e.ctx)
		if err != nil {
			return false, nil // the driver may be restarting
		}
		return slices.ContainsFunc(r.Started, func(c fault.Call) bool { return c.Method == method }), nil
	})
	if err != nil {
		e.t.Fatalf("waiting for the driver to see %s: %v", method, err)
	}
}

func mustContain(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("%s: output does not contain %q:\n%s", what, w, out)
		}
	}
}

// TestLifecycle: claim publishes through the real driver (ControllerPublish,
// NodeStage, NodePublish); once the allocation completes the watcher
// releases it with NodeUnpublish, NodeUnstage, ControllerUnpublish in that
// order; the fake cloud shows the disk detached; and the volume reads as in
// use until the claim is ready to free (hashicorp/nomad#8609).
func TestLifecycle(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.claim("vol1", "disk-1", "web-1", "node1")
	if got, want := e.calls(), []string{
		"controller:ControllerPublishVolume:OK", "node1:NodeStageVolume:OK", "node1:NodePublishVolume:OK",
	}; !slices.Equal(got, want) {
		t.Fatalf("claim calls = %v, want %v", got, want)
	}
	if !e.attached("disk-1", "node1") {
		t.Fatal("the fake cloud does not show disk-1 attached to node1 after the claim")
	}
	mustContain(t, "status", e.cli(0, "volume", "status", "vol1"), "web-1", "taken")
	e.cli(1, "volume", "deregister", "vol1") // in use

	// Hold the controller step so the half-released state can be read.
	if err := e.drv.Control.ResetCalls(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.drv.Control.Fault(e.ctx, fault.Rule{Method: "ControllerUnpublishVolume", Hang: "10m", Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-1")
	e.waitStarted("ControllerUnpublishVolume")
	v, _, err := e.agent.API.Volume(e.ctx, "vol1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Claims["web-1"]; c == nil || c.State != "node-detached" {
		t.Fatalf("while ControllerUnpublish is in flight the claim is %+v, want node-detached", c)
	}
	out := e.cli(1, "volume", "deregister", "vol1")
	mustContain(t, "deregister while detaching", out, "web-1")
	if !e.attached("disk-1", "node1") {
		t.Fatal("disk-1 detached before ControllerUnpublish ran")
	}
	if err := e.drv.Control.ClearFaults(e.ctx); err != nil { // the hang ends; the call reaches the driver
		t.Fatal(err)
	}
	e.waitReleased("vol1")
	if got, want := e.calls(), []string{
		"node1:NodeUnpublishVolume:OK", "node1:NodeUnstageVolume:OK", "controller:ControllerUnpublishVolume:OK",
	}; !slices.Equal(got, want) {
		t.Fatalf("release calls = %v, want %v", got, want)
	}
	if e.attached("disk-1", "node1") {
		t.Fatal("the fake cloud still shows disk-1 attached after the release")
	}
	mustContain(t, "events", e.cli(0, "events"), "node-detached", "controller-detached", "ready-to-free")
	e.cli(0, "volume", "deregister", "vol1")
}

// TestTransientErrorsRetried: node and controller steps fail with transient
// gRPC codes (injected around the real driver) and the fake cloud fails a
// detach, after which the driver applies its own backoff; volhost retries
// with backoff and the release completes.
func TestTransientErrorsRetried(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.claim("vol1", "disk-1", "web-1", "node1")
	if err := e.drv.Control.ResetCalls(e.ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range []fault.Rule{
		{Method: "NodeUnpublishVolume", Code: "Unavailable", Count: 2},
		{Method: "ControllerUnpublishVolume", Code: "DeadlineExceeded", Count: 1},
	} {
		if err := e.drv.Control.Fault(e.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.drv.Control.DetachErrors(e.ctx, 1); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-1")
	e.waitReleased("vol1")
	got := e.calls()
	count := func(s string) int {
		n := 0
		for _, c := range got {
			if c == s {
				n++
			}
		}
		return n
	}
	if count("node1:NodeUnpublishVolume:Unavailable") != 2 || count("node1:NodeUnpublishVolume:OK") != 1 {
		t.Errorf("node unpublish not retried past 2 Unavailable: %v", got)
	}
	if count("controller:ControllerUnpublishVolume:DeadlineExceeded") != 1 || count("controller:ControllerUnpublishVolume:OK") != 1 {
		t.Errorf("controller unpublish not retried to success: %v", got)
	}
	// The fake cloud's detach failure comes back from the real driver with
	// its own gRPC code, and its backoff may refuse the next call or two.
	failed := 0
	for _, c := range got {
		if strings.HasPrefix(c, "controller:ControllerUnpublishVolume:") && !strings.HasSuffix(c, ":OK") && !strings.HasSuffix(c, ":DeadlineExceeded") {
			failed++
		}
	}
	if failed == 0 {
		t.Errorf("the fake cloud's detach failure never reached volhost: %v", got)
	}
	if e.attached("disk-1", "node1") {
		t.Fatal("disk-1 still attached after the release")
	}
	mustContain(t, "events", e.cli(0, "events"), "claim-failed", "ready-to-free")
}

// TestPersistentDetachFailureStuck: every detach fails in the fake cloud;
// the volume becomes stuck with the driver's gRPC code; force-deregister
// then succeeds and leaves a leftover that names the node
// (hashicorp/nomad#8641).
func TestPersistentDetachFailureStuck(t *testing.T) {
	e := newEnv(t, envOptions{watcher: `
watcher {
  backoff_base = "20ms"
  backoff_max  = "100ms"
  max_attempts = 3
  csi_timeout  = "30s"
}
`})
	e.claim("vol1", "disk-2", "web-1", "node1")
	if err := e.drv.Control.DetachErrors(e.ctx, -1); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-1")
	v, err := e.agent.API.WaitVolume(e.ctx, "vol1", func(v *Volume) bool { return v.Stuck != nil })
	if err != nil {
		t.Fatalf("waiting for vol1 to be stuck: %v (%+v)", err, v)
	}
	// The code volhost reports is the one the driver answered with.
	var driverCode string
	for _, c := range e.calls() {
		if parts := strings.Split(c, ":"); parts[1] == "ControllerUnpublishVolume" && parts[2] != "OK" {
			driverCode = parts[2]
		}
	}
	if driverCode == "" || v.Stuck.CodeName != driverCode {
		t.Fatalf("stuck code %q (reason %q), driver answered %q", v.Stuck.CodeName, v.Stuck.Reason, driverCode)
	}
	if v.Stuck.NodeID != "node1" || v.Stuck.AllocID != "web-1" {
		t.Errorf("stuck does not name the claim: %+v", v.Stuck)
	}
	mustContain(t, "status", e.cli(0, "volume", "status", "vol1"), driverCode)

	out := e.cli(0, "volume", "deregister", "-force", "vol1")
	mustContain(t, "force deregister", out, "node1", e.drv.VolumeID("disk-2"))
	left := e.cli(0, "volume", "leftovers")
	mustContain(t, "leftovers", left, "node1", e.drv.NodeID("node1"), e.drv.VolumeID("disk-2"))
	if !e.attached("disk-2", "node1") {
		t.Fatal("the leftover is not real: disk-2 is not attached")
	}
}

// TestDriverRestartMidRelease: the driver process is killed while
// ControllerUnpublish is in flight; the volume stays in use; once the driver
// is back (same fake-cloud state) the release completes.
func TestDriverRestartMidRelease(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.claim("vol1", "disk-3", "web-1", "node1")
	if err := e.drv.Control.Fault(e.ctx, fault.Rule{Method: "ControllerUnpublishVolume", Hang: "10m"}); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-1")
	e.waitStarted("ControllerUnpublishVolume")
	e.drv.Kill()

	v, _, err := e.agent.API.Volume(e.ctx, "vol1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Claims) != 1 {
		t.Fatalf("claim gone while the driver is down: %+v", v.Claims)
	}
	e.cli(1, "volume", "deregister", "vol1") // still in use

	// The restarted driver holds ControllerUnpublish until the attachment is
	// checked: the watcher's retry would otherwise detach the disk first.
	hold := fault.Rule{Method: "ControllerUnpublishVolume", Hang: "10m"}
	if err := e.drv.Restart(e.ctx, hold); err != nil {
		t.Fatal(err)
	}
	if !e.attached("disk-3", "node1") {
		t.Fatal("the restarted driver lost the attachment (state file)")
	}
	if err := e.drv.Control.ClearFaults(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.waitReleased("vol1")
	if !slices.Contains(e.calls(), "controller:ControllerUnpublishVolume:OK") {
		t.Fatalf("the restarted driver never saw a successful ControllerUnpublish: %v", e.calls())
	}
	if e.attached("disk-3", "node1") {
		t.Fatal("disk-3 still attached after the release")
	}
}

// TestNodeDownSkipsNodeStep: with the node marked down the node step is
// skipped (nobody would answer it) and the controller step still runs.
func TestNodeDownSkipsNodeStep(t *testing.T) {
	e := newEnv(t, envOptions{nodes: []string{"node1", "node2"}})
	e.claim("vol1", "disk-1", "web-1", "node2")
	if err := e.drv.Control.ResetCalls(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "node", "set-status", "node2", "down")
	e.cli(0, "alloc", "update", "-status", "lost", "web-1")
	e.waitReleased("vol1")
	if got, want := e.calls(), []string{"controller:ControllerUnpublishVolume:OK"}; !slices.Equal(got, want) {
		t.Fatalf("release calls with node2 down = %v, want %v", got, want)
	}
	if e.attached("disk-1", "node2") {
		t.Fatal("disk-1 still attached to node2")
	}
}

// TestVolumeDetach: `volume detach` is refused while a live allocation uses
// the volume on the node (no CSI call made), and runs the release steps now
// once the allocation has ended, without waiting out the watcher's backoff.
func TestVolumeDetach(t *testing.T) {
	e := newEnv(t, envOptions{watcher: `
watcher {
  backoff_base = "10m"
  backoff_max  = "10m"
  csi_timeout  = "30s"
}
`})
	e.claim("vol1", "disk-1", "web-1", "node1")
	if err := e.drv.Control.ResetCalls(e.ctx); err != nil {
		t.Fatal(err)
	}
	out := e.cli(1, "volume", "detach", "vol1", "node1")
	mustContain(t, "detach with a live alloc", out, "web-1")
	if got := e.calls(); len(got) != 0 {
		t.Fatalf("a refused detach made CSI calls: %v", got)
	}

	// The watcher's first attempt fails and backs off for 10 minutes.
	if err := e.drv.Control.Fault(e.ctx, fault.Rule{Method: "NodeUnpublishVolume", Code: "Unavailable", Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-1")
	if _, err := e.agent.API.WaitVolume(e.ctx, "vol1", func(v *Volume) bool {
		c := v.Claims["web-1"]
		return c != nil && c.LastError != nil
	}); err != nil {
		t.Fatal(err)
	}
	out = e.cli(0, "volume", "detach", "vol1", "node1")
	mustContain(t, "detach after the alloc ended", out, "web-1")
	e.waitReleased("vol1")
	if got, want := e.calls(), []string{
		"node1:NodeUnpublishVolume:Unavailable",
		"node1:NodeUnpublishVolume:OK", "node1:NodeUnstageVolume:OK", "controller:ControllerUnpublishVolume:OK",
	}; !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if e.attached("disk-1", "node1") {
		t.Fatal("disk-1 still attached after detach")
	}
}

// TestWasmAdapterNodeIDs: with the gcepd-adapter Wasm module loaded (built
// by make plugins), a node registered with only GCE metadata and no node
// endpoint gets the external node ID from the module, and the real driver
// accepts it: ControllerPublish attaches the disk to that instance, and the
// release detaches it. Without the module the claim is refused for want of
// a node ID.
func TestWasmAdapterNodeIDs(t *testing.T) {
	build := os.Getenv("VOLHOST_E2E_PLUGIN_BUILD")
	if build == "" {
		peers, err := goOutput(context.Background(), "", "list", "-m", "-f", "{{.Dir}}", "github.com/volhost/volhost/test/peers")
		if err != nil {
			t.Fatal(err)
		}
		build = filepath.Join(peers, "..", "..", "examples", "plugins", "build")
	}
	modDir := t.TempDir()
	for _, f := range []string{"gcepd-adapter.wasm", "gcepd-adapter.hcl"} {
		b, err := os.ReadFile(filepath.Join(build, f))
		if err != nil {
			t.Fatalf("the gcepd-adapter module is not built (make plugins): %v", err)
		}
		if err := os.WriteFile(filepath.Join(modDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	meta := map[string]string{"gce.project": "test-project", "gce.zone": "us-central1-a", "gce.instance": "{node}"}
	e := newEnv(t, envOptions{plugin: "gcepd", nodeMeta: meta, agentArgs: []string{"-module-dir", modDir}})
	mustContain(t, "module list", e.cli(0, "module", "list"), "gcepd-adapter")

	e.claim("vol1", "disk-1", "web-1", "node1")
	r, err := e.drv.Control.Calls(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var publishNode string
	for _, c := range r.Calls {
		if c.Method == "ControllerPublishVolume" && c.Code == "OK" {
			publishNode = c.NodeID
		}
	}
	if publishNode != e.drv.NodeID("node1") {
		t.Fatalf("ControllerPublish node ID = %q, want %q (from the module)", publishNode, e.drv.NodeID("node1"))
	}
	if !e.attached("disk-1", "node1") {
		t.Fatal("disk-1 not attached to node1")
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-1")
	e.waitReleased("vol1")
	if e.attached("disk-1", "node1") {
		t.Fatal("disk-1 still attached after the release")
	}
}
