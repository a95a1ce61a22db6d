package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	nodeagent "github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
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
	cfg := localConfig()
	cfg.Watcher.BackoffBase, cfg.Watcher.BackoffMax = "10ms", "50ms"
	cfg.NodeRPC = &NodeRPCConfig{Address: "127.0.0.1:0", HeartbeatInterval: "10s", HeartbeatTTL: "30s"}
	a, c := startAgent(t, cfg, Options{Clock: clk, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn})})
	defer a.Shutdown()

	if _, err := c.RegisterPlugin(ctx, &structs.Plugin{ID: "csi", ControllerEndpoint: drv.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	na, err := nodeagent.New(nodeagent.Config{Servers: []string{a.NodeRPC.Addr()}, NodeID: "node1", RootDir: root,
		Plugins: map[string]string{"csi": drv.Endpoint()}, Clock: clockwork.NewFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() { agentDone <- na.Run(agentCtx) }()
	defer func() { stopAgent(); <-agentDone }()
	if err := na.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	n, _, err := c.Node(ctx, "node1", nil)
	if err != nil || !n.Agent || n.Plugins["csi"].ExternalNodeID != "ext-node1" {
		t.Fatalf("node registered by its agent = %+v (%v)", n, err)
	}
	if _, err := c.RegisterVolumes(ctx, []*structs.Volume{{ID: "vol1", ExternalID: "disk-1", PluginID: "csi",
		AccessMode: structs.AccessMultiNodeMultiWrite, AttachmentMode: structs.AttachFilesystem}}); err != nil {
		t.Fatal(err)
	}
	claim := func(alloc string) {
		t.Helper()
		if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: alloc, NodeID: "node1", ClientStatus: structs.AllocRunning}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "vol1", AllocID: alloc, NodeID: "node1", Mode: structs.ClaimWrite}); err != nil {
			t.Fatalf("claim %s: %v", alloc, err)
		}
	}
	end := func(alloc string) {
		t.Helper()
		if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: alloc, NodeID: "node1", ClientStatus: structs.AllocComplete}}); err != nil {
			t.Fatal(err)
		}
	}

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
	<-agentDone
	agentDone <- nil
	waitFor(t, ctx, "node1 down after the heartbeat TTL", func() bool {
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

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
