package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/acl"
	apiclient "github.com/volhost/volhost/host/api/client"
	nodeagent "github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// The node agent's whole story against one server: the claim and its
// release run through the agent (directories created as the CSI spec
// says), a killed agent's node goes down after the heartbeat TTL, its
// released claim waits visibly, and `node fence` lets it go to the
// controller step with the reason, counted in volhost_forced_detaches_total.
func TestNodeAgentClaimReleaseAndFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := t.TempDir()
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true,
		OnCall: func(c csitest.Call) {
			switch c.Method {
			case csitest.NodeStage:
				if fi, err := os.Stat(c.StagingPath); err != nil || !fi.IsDir() {
					t.Errorf("NodeStage: staging path is not a directory: %v", err)
				}
			case csitest.NodePublish:
				if _, err := os.Stat(filepath.Dir(c.TargetPath)); err != nil {
					t.Errorf("NodePublish: could not create target dir: %v", err)
				}
			}
		}})
	clk := clockwork.NewFakeClock()
	r := newAgentRig(t, ctx, clk, drv, root)
	a, c, claim, end := r.a, r.c, r.claim, r.end
	stopAgent := r.stopAgent

	claim("a1")
	end("a1")
	waitVolume(t, c, "vol1", func(v *structs.Volume) bool { return len(v.Claims) == 0 })
	want := []string{csitest.ControllerPublish, csitest.NodeStage, csitest.NodePublish,
		csitest.NodeUnpublish, csitest.NodeUnstage, csitest.ControllerUnpublish}
	if got := methods(drv.AllCalls()); !equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "csi", "csi", "per-alloc", "a1")); !os.IsNotExist(err) {
		t.Fatalf("the per-allocation directory survived the release: %v", err)
	}

	// The node is lost: its agent stops; after the TTL the node is down.
	claim("a2")
	stopAgent()
	testutil.WaitForCtx(t, ctx, "node1 down after the heartbeat TTL", func() bool {
		clk.Advance(10 * time.Second)
		n, _, err := c.Node(ctx, "node1", nil)
		return err == nil && n.Status == structs.NodeDown && n.HeartbeatLost
	})
	end("a2")
	held := waitVolume(t, c, "vol1", func(v *structs.Volume) bool {
		cl := v.Claims["a2"]
		return cl != nil && cl.Hold != nil
	})
	if h := held.Claims["a2"].Hold; h.Module != "volhost" || !strings.Contains(h.Reason, "volhost node fence") {
		t.Fatalf("the lost node's claim is held by %+v, want the host naming `volhost node fence`", h)
	}
	if n := len(drv.Calls(csitest.ControllerUnpublish)); n != 1 {
		t.Fatalf("ControllerUnpublish ran %d times before the fence, want 1 (a1's)", n)
	}

	if _, err := c.FenceNode(ctx, "node1", "powered off in console"); err != nil {
		t.Fatal(err)
	}
	waitVolume(t, c, "vol1", func(v *structs.Volume) bool { return len(v.Claims) == 0 })
	if n, u := len(drv.Calls(csitest.ControllerUnpublish)), len(drv.Calls(csitest.NodeUnpublish)); n != 2 || u != 1 {
		t.Fatalf("after the fence: %d ControllerUnpublish, %d NodeUnpublish; want 2 and 1", n, u)
	}
	evs, _, err := c.Events(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fenced bool
	for _, e := range evs {
		if e.AllocID == "a2" && strings.Contains(e.Fields["fence_reason"]+e.Message, "powered off in console") {
			fenced = true
		}
	}
	if !fenced {
		t.Error("no event of a2's release carries the fence reason")
	}
	resp, err := http.Get("http://" + a.HTTPAddr() + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `volhost_forced_detaches_total{reason="operator-fence"} 1`) {
		t.Error("volhost_forced_detaches_total did not count the forced detach")
	}
	// Fenced: no new claim on the node.
	if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: "a3", NodeID: "node1", ClientStatus: structs.AllocRunning}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "vol1", AllocID: "a3", NodeID: "node1", Mode: structs.ClaimWrite}); err == nil {
		t.Fatal("a fenced node took a claim")
	}
}

// agentRig is a dev server with node_rpc, a registered plugin, a node
// agent of node1 connected to it and a multi-writer volume vol1.
type agentRig struct {
	a          *Agent
	c          *apiclient.Client
	stopAgent  func() // stops the node agent and waits for it
	startAgent func() // starts it again (a restart) and waits until it is connected
	claim, end func(alloc string)
}

func newAgentRig(t *testing.T, ctx context.Context, clk clockwork.Clock, drv *csitest.Server, root string) *agentRig {
	t.Helper()
	return newAgentRigWith(t, ctx, clk, drv, root, nil)
}

// newAgentRigWith is newAgentRig with tweak applied to the server's config.
func newAgentRigWith(t *testing.T, ctx context.Context, clk clockwork.Clock, drv *csitest.Server, root string, tweak func(*Config)) *agentRig {
	t.Helper()
	cfg := localConfig()
	cfg.Watcher.BackoffBase, cfg.Watcher.BackoffMax = "10ms", "50ms"
	cfg.NodeRPC = &NodeRPCConfig{Address: "127.0.0.1:0", HeartbeatInterval: "10s", HeartbeatTTL: "30s"}
	if tweak != nil {
		tweak(cfg)
	}
	a, c := startAgent(t, cfg, Options{Clock: clk, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn})})
	t.Cleanup(func() { _ = a.Shutdown() })
	r := &agentRig{a: a, c: c}
	if _, err := c.RegisterPlugin(ctx, &structs.Plugin{ID: "csi", ControllerEndpoint: drv.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	var stop context.CancelFunc
	var done chan error
	r.startAgent = func() {
		t.Helper()
		na, err := nodeagent.New(nodeagent.Config{Servers: []string{a.NodeRPC.Addr()}, NodeID: "node1", RootDir: root,
			Plugins: map[string]string{"csi": drv.Endpoint()}, Clock: clockwork.NewFakeClock()})
		if err != nil {
			t.Fatal(err)
		}
		var actx context.Context
		actx, stop = context.WithCancel(ctx)
		done = make(chan error, 1)
		go func() { done <- na.Run(actx) }()
		if err := na.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
		// Connected means the server registered it: the node's steps go
		// through this agent from now on.
		testutil.WaitForCtx(t, ctx, "the server to route node1 to the new agent", func() bool { return a.NodeRPC.Agent("node1") != nil })
	}
	r.stopAgent = func() {
		if stop != nil {
			stop()
			<-done
			stop = nil
		}
	}
	t.Cleanup(r.stopAgent)
	r.startAgent()
	n, _, err := c.Node(ctx, "node1", nil)
	if err != nil || !n.Agent || n.Plugins["csi"].ExternalNodeID != "ext-node1" {
		t.Fatalf("node registered by its agent = %+v (%v)", n, err)
	}
	if _, err := c.RegisterVolumes(ctx, []*structs.Volume{{ID: "vol1", ExternalID: "disk-1", PluginID: "csi",
		AccessMode: structs.AccessMultiNodeMultiWrite, AttachmentMode: structs.AttachFilesystem}}); err != nil {
		t.Fatal(err)
	}
	r.claim = func(alloc string) {
		t.Helper()
		if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: alloc, NodeID: "node1", ClientStatus: structs.AllocRunning}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "vol1", AllocID: alloc, NodeID: "node1", Mode: structs.ClaimWrite}); err != nil {
			t.Fatalf("claim %s: %v", alloc, err)
		}
	}
	r.end = func(alloc string) {
		t.Helper()
		if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: alloc, NodeID: "node1", ClientStatus: structs.AllocComplete}}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// Staging refcounts survive an agent restart (Nomad #25813): two claims
// share the node's staging path; the agent restarts between their
// releases; the first release unpublishes only, the second unstages,
// because the leader decides from the committed claims, not from
// anything the agent remembered.
func TestStagingSurvivesAgentRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	r := newAgentRig(t, ctx, clockwork.NewFakeClock(), drv, t.TempDir())
	r.claim("a1")
	r.claim("a2")
	if n := len(drv.Calls(csitest.NodeStage)); n != 1 {
		t.Fatalf("NodeStage ran %d times for two claims on one node, want 1", n)
	}
	r.stopAgent()
	r.startAgent()
	r.end("a1")
	waitVolume(t, r.c, "vol1", func(v *structs.Volume) bool { return v.Claims["a1"] == nil })
	if u, s := len(drv.Calls(csitest.NodeUnpublish)), len(drv.Calls(csitest.NodeUnstage)); u != 1 || s != 0 {
		t.Fatalf("first release after the restart: %d NodeUnpublish, %d NodeUnstage; want 1 and 0", u, s)
	}
	r.stopAgent()
	r.startAgent()
	r.end("a2")
	waitVolume(t, r.c, "vol1", func(v *structs.Volume) bool { return len(v.Claims) == 0 })
	if u, s := len(drv.Calls(csitest.NodeUnpublish)), len(drv.Calls(csitest.NodeUnstage)); u != 2 || s != 1 {
		t.Fatalf("last release: %d NodeUnpublish, %d NodeUnstage; want 2 and 1", u, s)
	}
}

// With ACLs on, a node agent needs a token granting node:write on its
// node through a node_id rule (or management): one that only reads
// nodes, the node block's write alone, or none, is refused before its
// node is registered.
func TestNodeAgentNeedsNodeWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := localConfig()
	cfg.ACL.Enabled = true
	cfg.NodeRPC = &NodeRPCConfig{Address: "127.0.0.1:0"}
	a, _ := startAgent(t, cfg, Options{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn})})
	defer a.Shutdown()
	_, mgmt, err := a.ACL.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, rules := range map[string]string{"node-reader": `node { policy = "read" }`, "node-writer": `node { policy = "write" }`,
		"node1-writer": `node_id "node1" { policy = "write" }`, "node2-writer": `node_id "node2" { policy = "write" }`} {
		if _, err := a.ACL.UpsertPolicy(ctx, "test", &structs.ACLPolicy{Name: name, Rules: rules}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(policy string) string {
		_, secret, err := a.ACL.CreateToken(ctx, "test", acl.NewToken{Name: policy, Policies: []string{policy}})
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1"})
	if _, err := a.Server.RegisterPlugin(ctx, &structs.Plugin{ID: "csi"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{"no token", "", false},
		{"read only", token("node-reader"), false},
		{"node write, the API's (no node_id rule)", token("node-writer"), false},
		{"its own node only", token("node1-writer"), true},
		{"another node's token", token("node2-writer"), false},
		{"management", mgmt, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lazyAuth{a}.Authorize(ctx, tc.token, "node1")
			if tc.ok != (err == nil) {
				t.Fatalf("authorize: %v, want ok=%v", err, tc.ok)
			}
			if tc.ok {
				return
			}
			// The same refusal over the wire: the agent never connects
			// and the node is never registered.
			clk := clockwork.NewFakeClock()
			na, stop := runNodeAgent(ctx, t, nodeagent.Config{Servers: []string{a.NodeRPC.Addr()}, NodeID: "node1", RootDir: t.TempDir(),
				Plugins: map[string]string{"csi": drv.Endpoint()}, Token: tc.token, Clock: clk})
			// The refused session ends in the reconnect backoff, a wait on
			// the fake clock (a connected agent would be heartbeating).
			if err := clk.BlockUntilContext(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if na.Connected() != "" || a.NodeRPC.Agent("node1") != nil {
				t.Fatal("the agent connected without node:write")
			}
			stop()
			if n, _ := a.Store.Snapshot().NodeByID(nil, "node1"); n != nil {
				t.Fatalf("a refused agent registered its node: %+v", n)
			}
		})
	}
}

// runNodeAgent runs a node agent with cfg until stop is called or the
// test ends; stop returns once Run has.
func runNodeAgent(ctx context.Context, t *testing.T, cfg nodeagent.Config) (na *nodeagent.Agent, stop func()) {
	t.Helper()
	na, err := nodeagent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- na.Run(actx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return na, stop
}
