package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
}
`, e.nodeRPC, n, filepath.Join(e.dir, "root-"+n), e.plugin, Endpoint(e.drv.Nodes[n])))
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
		mustContain(t, "node status", e.cli(0, "node", "status", n), e.drv.NodeID(n), "ready")
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
