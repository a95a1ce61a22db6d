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

// TestNodeAgents runs the node agent with real processes: one server
// listening for agents, two `volhost agent -client` processes each serving
// one GCE PD node socket (the driver's fake mounter), and the driver's
// controller reached from the server. The claim and its release go
// through the clients; then a client is killed: its node goes down after
// the heartbeat TTL, its released claim waits (visible in volume status),
// `node fence` sends it to the controller detach with the reason.
func TestNodeAgents(t *testing.T) {
	nodes := []string{"n1", "n2"}
	e := newEnv(t, envOptions{agentNodes: nodes})
	// Each node also runs the csi-test mock driver, as a second plugin;
	// the server reaches n1's for the mock's controller service.
	mocks := map[string]*Control{}
	mockSock := map[string]string{}
	for _, n := range nodes {
		mockSock[n] = filepath.Join(filepath.Dir(e.drv.Controller), "m-"+n+".sock")
		ctl := filepath.Join(filepath.Dir(e.drv.Controller), "mctl-"+n+".sock")
		p, err := Start(e.dir, "mockcsi-"+n, bins.Mockcsi, "-endpoint", mockSock[n], "-control", ctl, "-node-id", "mock-"+n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(5 * time.Second) })
		mocks[n] = NewControl(ctl)
		if err := Poll(e.ctx, 10*time.Millisecond, func() (bool, error) { return mocks[n].Ready(e.ctx), nil }); err != nil {
			t.Fatalf("mockcsi on %s did not start: %v\n%s", n, err, p.Tail(2000))
		}
	}
	e.cli(0, "plugin", "register", e.spec("mock-plugin.hcl", fmt.Sprintf("plugin \"mock\" {\n  controller_endpoint = %q\n}\n", Endpoint(mockSock["n1"]))))
	clients := map[string]*Proc{}
	for _, n := range nodes {
		cfg := e.spec("client-"+n+".hcl", fmt.Sprintf(`
log_level = "debug"
client {
  servers  = [%q]
  node_id  = %q
  root_dir = %q
  plugin %q {
    socket = %q
  }
  plugin "mock" {
    socket = %q
  }
}
`, e.nodeRPC, n, filepath.Join(e.dir, "root-"+n), e.plugin, Endpoint(e.drv.Nodes[n]), Endpoint(mockSock[n])))
		p, err := Start(e.dir, "client-"+n, bins.Volhost, "agent", "-client", "-config", cfg)
		if err != nil {
			t.Fatal(err)
		}
		clients[n] = p
		t.Cleanup(func() {
			p.Stop(5 * time.Second)
			if t.Failed() {
				t.Logf("client %s log tail:\n%s", n, p.Tail(4000))
			}
		})
	}
	for _, n := range nodes {
		e.waitNode(n, func(out string) bool { return strings.Contains(out, "yes (node steps go through the node agent)") })
		mustContain(t, "node status", e.cli(0, "node", "status", n), e.drv.NodeID(n), "mock-"+n, "ready")
	}

	// The csi-test mock on n1, through its client.
	e.cli(0, "volume", "register", e.spec("mvol.hcl", "volume \"mvol\" {\n  external_id = \"mock-vol-1\"\n  plugin_id = \"mock\"\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n"))
	e.cli(0, "alloc", "register", e.spec("malloc.hcl", "alloc \"m1\" {\n  node_id = \"n1\"\n  client_status = \"running\"\n}\n"))
	e.cli(0, "volume", "claim", "-alloc", "m1", "-node", "n1", "-mode", "write", "mvol")
	e.cli(0, "alloc", "update", "-status", "complete", "m1")
	e.waitReleased("mvol")
	mc, err := mocks["n1"].Calls(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mockCalls []string
	for _, c := range mc.Calls {
		if c.VolumeID != "" {
			mockCalls = append(mockCalls, c.Method+":"+c.Code)
		}
	}
	wantMock := []string{"ControllerPublishVolume:OK", "NodeStageVolume:OK", "NodePublishVolume:OK",
		"NodeUnpublishVolume:OK", "NodeUnstageVolume:OK", "ControllerUnpublishVolume:OK"}
	if !slices.Equal(mockCalls, wantMock) {
		t.Fatalf("mock calls = %v, want %v", mockCalls, wantMock)
	}

	// Claim and release on n1, every node step through its client.
	e.claim("vol1", "disk-0", "a1", "n1")
	staging := filepath.Join(e.dir, "root-n1", "csi", e.plugin, "staging", "default", "vol1")
	if fi, err := os.Stat(staging); err != nil || !fi.IsDir() {
		t.Fatalf("the client did not create the staging directory %s: %v", staging, err)
	}
	if !e.attached("disk-0", "n1") {
		t.Fatal("disk-0 not attached to n1 after the claim")
	}
	e.cli(0, "alloc", "update", "-status", "complete", "a1")
	e.waitReleased("vol1")
	if e.attached("disk-0", "n1") {
		t.Fatal("disk-0 still attached to n1 after the release")
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Fatalf("the staging directory survived the unstage: %v", err)
	}
	want := []string{"controller:ControllerPublishVolume:OK", "n1:NodeStageVolume:OK", "n1:NodePublishVolume:OK",
		"n1:NodeUnpublishVolume:OK", "n1:NodeUnstageVolume:OK", "controller:ControllerUnpublishVolume:OK"}
	if got := e.calls(); !slices.Equal(got, want) {
		t.Fatalf("driver calls = %v, want %v", got, want)
	}

	// n2 is lost: its client is killed while a claim is published there.
	e.claim("vol2", "disk-1", "a2", "n2")
	clients["n2"].Kill()
	e.waitNode("n2", func(out string) bool { return strings.Contains(out, "down") })
	e.cli(0, "alloc", "update", "-status", "complete", "a2")
	v, err := e.agent.API.WaitVolume(e.ctx, "vol2", func(v *Volume) bool {
		c := v.Claims["a2"]
		return c != nil && c.Hold != nil
	})
	if err != nil {
		t.Fatalf("waiting for the lost node's claim to wait: %v", err)
	}
	if h := v.Claims["a2"].Hold; h.Module != "volhost" || !strings.Contains(h.Reason, "volhost node fence") {
		t.Fatalf("hold = %+v", h)
	}
	mustContain(t, "volume status", e.cli(0, "volume", "status", "vol2"), "volhost node fence")
	if !e.attached("disk-1", "n2") {
		t.Fatal("disk-1 detached from the lost node before any fence: a timeout must never detach")
	}

	e.cli(0, "node", "fence", "-reason", "powered off in console", "n2")
	mustContain(t, "node status", e.cli(0, "node", "status", "n2"), "fenced, down", "powered off in console")
	e.waitReleased("vol2")
	if e.attached("disk-1", "n2") {
		t.Fatal("disk-1 still attached after the fence")
	}
	mustContain(t, "events", e.cli(0, "events"), "powered off in console")
	metrics, err := e.agent.API.Metrics(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "metrics", metrics, `volhost_forced_detaches_total{reason="operator-fence"} 1`)
}

// nodeAgentStarter writes a `volhost agent -client` config for node (its
// root_dir under the test's directory, its plugin at the driver's node
// endpoint) and returns the root and a function that starts one agent
// process under a name; each is stopped at cleanup and its log tail
// printed when the test failed.
func (e *env) nodeAgentStarter(node string) (string, func(name string) *Proc) {
	t := e.t
	root := filepath.Join(e.dir, "root-"+node)
	cfg := e.spec("client-"+node+".hcl", fmt.Sprintf(`
log_level = "debug"
client {
  servers  = [%q]
  node_id  = %q
  root_dir = %q
  plugin %q {
    socket = %q
  }
}
`, e.nodeRPC, node, root, e.plugin, Endpoint(e.drv.Nodes[node])))
	return root, func(name string) *Proc {
		t.Helper()
		p, err := Start(e.dir, name, bins.Volhost, "agent", "-client", "-config", cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Stop(5 * time.Second)
			if t.Failed() {
				t.Logf("%s log tail:\n%s", name, p.Tail(4000))
			}
		})
		return p
	}
}

// waitNode polls `node status ID` until ok accepts its output.
func (e *env) waitNode(id string, ok func(string) bool) {
	e.t.Helper()
	var last string
	err := Poll(e.ctx, 50*time.Millisecond, func() (bool, error) {
		out, code, err := e.agent.CLI(e.ctx, "node", "status", id)
		last = out
		return err == nil && code == 0 && ok(out), nil
	})
	if err != nil {
		e.t.Fatalf("waiting for node %s: %v; last status:\n%s", id, err, last)
	}
}

// TestNodeAgentLeaderFailover: three servers each listening for node
// agents, one client connected to the leader with a claim published
// through it; the leader is SIGKILLed; the client follows the new leader,
// which releases the claim through it. The node is never marked down on
// the way (the new leader's heartbeat grace).
func TestNodeAgentLeaderFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	drv := startDriver(ctx, t, dir, GCEPDOptions{Nodes: []string{"n1"}, Disks: 1})
	var rpcAddrs []string
	cl, err := StartClusterWith(ctx, dir, bins.Volhost, 3, defaultWatcher+"node_rpc {\n  heartbeat_interval = \"500ms\"\n  heartbeat_ttl = \"5s\"\n}\n",
		func(id string, addr func() (string, error)) ([]string, error) {
			rpc, err := addr()
			rpcAddrs = append(rpcAddrs, rpc)
			return []string{"-node-rpc-addr", rpc}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cl)
	cl.CLI(ctx, t, "plugin", "register", writeSpec(t, dir, "plugin.hcl", fmt.Sprintf("plugin \"gcepd\" {\n  controller_endpoint = %q\n}\n", Endpoint(drv.Controller))))
	quoted := make([]string, len(rpcAddrs))
	for i, a := range rpcAddrs {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	client, err := Start(dir, "client-n1", bins.Volhost, "agent", "-client", "-config", writeSpec(t, dir, "client.hcl", fmt.Sprintf(`
client {
  servers  = [%s]
  node_id  = "n1"
  root_dir = %q
  plugin "gcepd" {
    socket = %q
  }
}
`, strings.Join(quoted, ", "), filepath.Join(dir, "root-n1"), Endpoint(drv.Nodes["n1"]))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		client.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("client log tail:\n%s", client.Tail(4000))
		}
	}()
	if err := cl.waitNodeAgent(ctx, "n1"); err != nil {
		t.Fatalf("the client did not register n1: %v", err)
	}
	cl.CLI(ctx, t, "volume", "register", writeSpec(t, dir, "vol.hcl", fmt.Sprintf("volume \"vol1\" {\n  external_id = %q\n  plugin_id = \"gcepd\"\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n  fs_type = \"ext4\"\n}\n", drv.VolumeID("disk-0"))))
	cl.CLI(ctx, t, "alloc", "register", writeSpec(t, dir, "alloc.hcl", "alloc \"a1\" {\n  node_id = \"n1\"\n  client_status = \"running\"\n}\n"))
	cl.CLI(ctx, t, "volume", "claim", "-alloc", "a1", "-node", "n1", "-mode", "write", "vol1")

	leader, err := cl.WaitLeader(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	leader.KillNow()
	if _, err := cl.WaitLeader(ctx, leader); err != nil {
		t.Fatal(err)
	}
	cl.CLI(ctx, t, "alloc", "update", "-status", "complete", "a1")
	if err := cl.waitReleased(ctx, "vol1"); err != nil {
		t.Fatalf("the new leader did not release the claim through the client: %v", err)
	}
	on, err := drv.Control.Attached(ctx, "disk-0", "n1")
	if err != nil || on {
		t.Fatalf("disk-0 attached after the release: %v %v", on, err)
	}
	r, err := drv.Control.Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var unpublish int
	for _, c := range r.Calls {
		if c.Method == "NodeUnpublishVolume" && c.Code == "OK" {
			unpublish++
		}
	}
	if unpublish != 1 {
		t.Fatalf("NodeUnpublishVolume succeeded %d times, want exactly 1", unpublish)
	}
	if out := cl.CLI(ctx, t, "events"); strings.Contains(out, "node n1 is down") {
		t.Fatalf("the failover marked n1 down:\n%s", out)
	}
}

// TestNodeAgentRestartMidRelease: a node agent is SIGKILLed and started
// again in the middle of a release, while the GCE PD driver holds its
// NodeUnstage (a fault rule, so the kill lands there every time, with no
// timing). The release resumes through the new agent at the unstage: the
// driver sees exactly one successful NodeUnpublish for the claim, the
// release completes, the staging directory is removed, and the new agent
// says in its log that it called the unanswered step again.
func TestNodeAgentRestartMidRelease(t *testing.T) {
	e := newEnv(t, envOptions{agentNodes: []string{"n1"}})
	root, start := e.nodeAgentStarter("n1")
	first := start("client-n1")
	e.waitNode("n1", func(out string) bool { return strings.Contains(out, "yes (node steps go through the node agent)") })
	e.claim("vol1", "disk-0", "a1", "n1")
	staging := filepath.Join(root, "csi", e.plugin, "staging", "default", "vol1")
	if fi, err := os.Stat(staging); err != nil || !fi.IsDir() {
		t.Fatalf("no staging directory %s after the claim: %v", staging, err)
	}

	// Hold the next NodeUnstage in the driver until its caller is gone.
	if err := e.drv.Control.Fault(e.ctx, fault.Rule{Method: "NodeUnstageVolume", Hang: "10m", Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "a1")
	e.waitStarted("NodeUnstageVolume")
	// The unpublish is committed before the unstage is sent.
	v, _, err := e.agent.API.Volume(e.ctx, "vol1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Claims["a1"]; c == nil || c.State != "taken" || !c.NodeUnpublished {
		t.Fatalf("claim during the held unstage = %+v, want taken with node_unpublished", c)
	}
	mustContain(t, "volume status", e.cli(0, "volume", "status", "vol1"), "taken (unpublished, unstage next)")
	first.Kill()
	second := start("client-n1-restarted")
	e.waitReleased("vol1")

	var unpublished, unstaged int
	var calls []string
	r, err := e.drv.Control.Calls(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Calls {
		if c.VolumeID == "" {
			continue
		}
		calls = append(calls, c.Service+":"+c.Method+":"+c.Code)
		switch {
		case c.Method == "NodeUnpublishVolume" && c.Code == "OK":
			unpublished++
		case c.Method == "NodeUnstageVolume" && c.Code == "OK":
			unstaged++
		}
	}
	if unpublished != 1 || unstaged != 1 {
		t.Fatalf("successful NodeUnpublish %d, NodeUnstage %d; want exactly 1 each; driver calls %v", unpublished, unstaged, calls)
	}
	if e.attached("disk-0", "n1") {
		t.Fatal("disk-0 still attached to n1 after the release")
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Fatalf("the staging directory survived the unstage: %v", err)
	}
	// The killed agent journaled the unstage as started and never
	// answered: the new one called it again, and said so.
	mustContain(t, "restarted client log", second.Tail(1<<20), "may or may not have run")
}

// TestNodeAgentKilledAfterEffect: a node agent is SIGKILLed after the
// driver acted on a step and before the answer reached the leader (the
// driver runs the call and then holds its answer: a Lose rule with a
// hang), once in the claim path at NodePublish and once in the release at
// NodeUnstage. A call whose answer was lost may have run: the claim taken
// up again publishes again (NodeStage and NodePublish are idempotent by
// the CSI spec) and the release re-sends the unstage through the new agent
// before it detaches. Judged by the driver: its staging and target
// directories, its attachment, and the order of its calls.
func TestNodeAgentKilledAfterEffect(t *testing.T) {
	e := newEnv(t, envOptions{agentNodes: []string{"n1"}})
	root, start := e.nodeAgentStarter("n1")
	agent := start("client-n1")
	e.waitNode("n1", func(out string) bool { return strings.Contains(out, "yes (node steps go through the node agent)") })
	staging := filepath.Join(root, "csi", e.plugin, "staging", "default", "vol1")
	target := filepath.Join(root, "csi", e.plugin, "per-alloc", "a1", "default", "vol1")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		if err := Poll(e.ctx, 10*time.Millisecond, func() (bool, error) { return ok(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	connected := func(out string) bool { return strings.Contains(out, "yes (node steps go through the node agent)") }

	e.cli(0, "volume", "register", e.spec("vol1.hcl", fmt.Sprintf(`
volume "vol1" {
  external_id     = %q
  plugin_id       = %q
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
  fs_type         = "ext4"
}
`, e.drv.VolumeID("disk-0"), e.plugin)))
	e.cli(0, "alloc", "register", e.spec("a1.hcl", `
alloc "a1" {
  node_id       = "n1"
  job_id        = "job-a1"
  client_status = "running"
}
`))

	// The claim: NodePublish runs at the driver, its answer is held, the
	// agent dies. The claim is answered with an error.
	if err := e.drv.Control.Fault(e.ctx, fault.Rule{Method: "NodePublishVolume", Code: "Unavailable", Lose: true, Hang: "10m", Count: 1}); err != nil {
		t.Fatal(err)
	}
	claimed := make(chan int, 1)
	go func() {
		_, code, _ := e.agent.CLI(e.ctx, "volume", "claim", "-alloc", "a1", "-node", "n1", "-mode", "write", "vol1")
		claimed <- code
	}()
	waitFor("the driver to run the NodePublish", func() bool {
		r, err := e.drv.Control.Calls(e.ctx)
		return err == nil && slices.ContainsFunc(r.Started, func(c fault.Call) bool {
			return c.Method == "NodePublishVolume" && c.Ran && c.DriverCode == "OK"
		})
	})
	agent.Kill()
	if code := <-claimed; code == 0 {
		t.Fatal("the claim whose NodePublish answer was lost succeeded")
	}
	agent = start("client-n1-second")
	e.waitNode("n1", connected)
	// The scheduler asks again (what Nomad's claim retry does).
	if err := Poll(e.ctx, 100*time.Millisecond, func() (bool, error) {
		_, code, err := e.agent.CLI(e.ctx, "volume", "claim", "-alloc", "a1", "-node", "n1", "-mode", "write", "vol1")
		return err == nil && code == 0, nil
	}); err != nil {
		t.Fatalf("the claim taken up again: %v", err)
	}
	// The driver keeps no target directory (its mounter is a fake), so
	// "published" is its log: a NodePublish answered OK after the lost one.
	if !exists(staging) || !e.attached("disk-0", "n1") || !publishedAgain(t, e) {
		t.Fatalf("after the claim: staged %v, attached %v; want both, and a NodePublish answered OK after the lost one", exists(staging), e.attached("disk-0", "n1"))
	}

	// The release: NodeUnstage runs at the driver, its answer is held, the
	// agent dies; the next agent finishes the release.
	if err := e.drv.Control.Fault(e.ctx, fault.Rule{Method: "NodeUnstageVolume", Code: "Unavailable", Lose: true, Hang: "10m", Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "a1")
	waitFor("the driver to unstage "+staging, func() bool { return !exists(staging) })
	if !e.attached("disk-0", "n1") {
		t.Fatal("disk-0 detached while the unstage's answer is still outstanding")
	}
	agent.Kill()
	third := start("client-n1-third")
	e.waitReleased("vol1")

	if exists(staging) || exists(target) || e.attached("disk-0", "n1") {
		t.Fatalf("after the release: staged %v, target %v, attached %v; want none", exists(staging), exists(target), e.attached("disk-0", "n1"))
	}
	// In the driver's log the detach comes after the last unstage, and an
	// unstage after the last publish.
	r, err := e.drv.Control.Calls(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	var calls []string
	for i, c := range r.Calls {
		if c.VolumeID == "" {
			continue
		}
		calls = append(calls, c.Method+":"+c.Code)
		if c.Code == "OK" || c.Ran {
			last[c.Method] = i
		}
	}
	detach, ok := last["ControllerUnpublishVolume"]
	if !ok || last["NodeUnstageVolume"] > detach || last["NodeUnpublishVolume"] > last["NodeUnstageVolume"] || last["NodePublishVolume"] > last["NodeUnpublishVolume"] {
		t.Fatalf("driver calls out of order: %v", calls)
	}
	mustContain(t, "third client log", third.Tail(1<<20), "may or may not have run")
}

// publishedAgain: the driver's log holds a NodePublishVolume answered OK
// after one whose answer was lost.
func publishedAgain(t *testing.T, e *env) bool {
	t.Helper()
	r, err := e.drv.Control.Calls(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := false
	for _, c := range r.Calls {
		switch {
		case c.Method == "NodePublishVolume" && c.Ran:
			lost = true
		case c.Method == "NodePublishVolume" && c.Code == "OK" && lost:
			return true
		}
	}
	return false
}
