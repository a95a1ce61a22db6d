package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// testAgent starts an agent on a free port; dataDir "" runs it in dev mode.
func testAgent(t *testing.T, dataDir string) (*Agent, *client.Client) {
	t.Helper()
	cfg := localConfig()
	cfg.Dev = dataDir == ""
	cfg.DataDir = dataDir
	cfg.Watcher.BackoffBase = "10ms"
	cfg.Watcher.BackoffMax = "50ms"
	return startAgent(t, cfg, Options{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: hclog.DefaultOutput})})
}

// localConfig is a dev agent's configuration on free loopback ports.
func localConfig() *Config {
	cfg := DefaultConfig()
	cfg.Dev = true
	cfg.BindAddr = "127.0.0.1:0"
	cfg.HTTP.Address = "127.0.0.1:0"
	return cfg
}

// startAgent creates and starts an agent, waits until it leads and returns
// it with a client of its API. The caller owns its shutdown.
func startAgent(tb testing.TB, cfg *Config, opts Options) (*Agent, *client.Client) {
	tb.Helper()
	a, err := New(cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Cluster.WaitForLeader(ctx); err != nil {
		tb.Fatal(err)
	}
	waitModulesLoaded(tb, a)
	c, err := client.New("http://"+a.HTTPAddr(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return a, c
}

// waitModulesLoaded waits for the agent's first module load (it runs
// after the API listens), within the package's test timeout: a cold
// compile under -race takes tens of seconds.
func waitModulesLoaded(tb testing.TB, a *Agent) {
	tb.Helper()
	select {
	case <-a.ModulesLoaded():
	case <-time.After(10 * time.Minute):
		tb.Fatal("the agent's modules did not load within 10 minutes")
	}
}

// waitVolume follows the volume with blocking queries until cond holds.
func waitVolume(t *testing.T, c *client.Client, id string, cond func(*structs.Volume) bool) *structs.Volume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var index uint64
	for {
		resp, meta, err := c.Volume(ctx, "default", id, &client.QueryOptions{Index: index, Wait: 5 * time.Second})
		if err != nil {
			t.Fatalf("waiting for volume %s: %v", id, err)
		}
		if cond(resp.Volume) {
			return resp.Volume
		}
		index = meta.Index
	}
}

// register sets up a plugin with a controller, a node running its node
// service, a single-writer volume and a running allocation.
func register(t *testing.T, c *client.Client, drv *csitest.Server, allocs ...string) {
	t.Helper()
	ctx := context.Background()
	p, err := c.RegisterPlugin(ctx, &structs.Plugin{ID: "csi", ControllerEndpoint: drv.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Capabilities.PublishUnpublish {
		t.Fatalf("probe did not record PUBLISH_UNPUBLISH_VOLUME: %+v", p.Capabilities)
	}
	n, err := c.RegisterNode(ctx, &structs.Node{ID: "node1", RootDir: t.TempDir(), Plugins: map[string]*structs.NodePlugin{
		"csi": {Endpoint: drv.Endpoint()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Plugins["csi"].ExternalNodeID; got != "ext-node1" {
		t.Fatalf("external node ID = %q, want the NodeGetInfo answer ext-node1", got)
	}
	if _, err := c.RegisterVolumes(ctx, []*structs.Volume{{
		ID: "vol1", ExternalID: "disk-1", PluginID: "csi",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
	}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range allocs {
		if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: id, NodeID: "node1", ClientStatus: structs.AllocRunning}}); err != nil {
			t.Fatal(err)
		}
	}
}

func methods(calls []csitest.Call) []string {
	var out []string
	for _, c := range calls {
		switch c.Method {
		case csitest.ControllerPublish, csitest.ControllerUnpublish, csitest.NodeStage,
			csitest.NodeUnstage, csitest.NodePublish, csitest.NodeUnpublish:
			out = append(out, c.Method)
		}
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The README walk-through, against a scripted CSI driver: claim publishes,
// a second writer is refused until the first claim is fully released, the
// release runs node unpublish, unstage, controller unpublish in that order.
func TestAgentClaimLifecycle(t *testing.T) {
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	a, c := testAgent(t, "")
	defer a.Shutdown()
	register(t, c, drv, "web-1", "web-2")
	ctx := context.Background()

	claim, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "vol1", AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite})
	if err != nil {
		t.Fatal(err)
	}
	if claim.ExternalNodeID != "ext-node1" || claim.State != structs.ClaimTaken {
		t.Fatalf("claim = %+v", claim)
	}
	if got, want := methods(drv.AllCalls()), []string{csitest.ControllerPublish, csitest.NodeStage, csitest.NodePublish}; !equal(got, want) {
		t.Fatalf("claim calls = %v, want %v", got, want)
	}
	if !drv.Attached("disk-1", "ext-node1") {
		t.Fatal("driver does not show the disk attached")
	}

	_, err = c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "vol1", AllocID: "web-2", NodeID: "node1", Mode: structs.ClaimWrite})
	if !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("second writer on a single-writer volume: err = %v, want a conflict", err)
	}

	// The job ends: the watcher releases the claim without anyone asking.
	if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: "web-1", NodeID: "node1", ClientStatus: structs.AllocComplete}}); err != nil {
		t.Fatal(err)
	}
	waitVolume(t, c, "vol1", func(v *structs.Volume) bool { return len(v.Claims) == 0 })
	want := []string{csitest.ControllerPublish, csitest.NodeStage, csitest.NodePublish,
		csitest.NodeUnpublish, csitest.NodeUnstage, csitest.ControllerUnpublish}
	if got := methods(drv.AllCalls()); !equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if drv.Attached("disk-1", "ext-node1") {
		t.Fatal("disk still attached after release")
	}
	if unpub := drv.Calls(csitest.ControllerUnpublish); unpub[0].NodeID != "ext-node1" {
		t.Fatalf("controller unpublish sent node ID %q", unpub[0].NodeID)
	}

	// Freed: the second writer may claim now.
	if _, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "vol1", AllocID: "web-2", NodeID: "node1", Mode: structs.ClaimWrite}); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
}

// A publish that fails half way is rolled back and nothing is recorded.
func TestAgentClaimRollsBackFailedPublish(t *testing.T) {
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	a, c := testAgent(t, "")
	defer a.Shutdown()
	register(t, c, drv, "web-1")
	drv.Script(csitest.NodePublish, csitest.Result{Code: 13, Message: "mount failed"})

	_, err := c.ClaimVolume(context.Background(), &structs.ClaimRequest{VolumeID: "vol1", AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite})
	if err == nil {
		t.Fatal("claim succeeded although NodePublish failed")
	}
	want := []string{csitest.ControllerPublish, csitest.NodeStage, csitest.NodePublish, csitest.NodeUnstage, csitest.ControllerUnpublish}
	if got := methods(drv.AllCalls()); !equal(got, want) {
		t.Fatalf("calls = %v, want %v (rollback newest first)", got, want)
	}
	if drv.Attached("disk-1", "ext-node1") {
		t.Fatal("failed claim left the disk attached")
	}
	v := waitVolume(t, c, "vol1", func(*structs.Volume) bool { return true })
	if len(v.Claims) != 0 {
		t.Fatalf("failed claim recorded: %+v", v.Claims)
	}
}

// Restart from -data-dir in the middle of a release: the claim checkpointed
// at node-detached survives, and the new agent finishes the release.
func TestAgentRestartResumesRelease(t *testing.T) {
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	dir := t.TempDir()
	a, c := testAgent(t, dir)
	register(t, c, drv, "web-1")
	ctx := context.Background()
	if _, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "vol1", AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite}); err != nil {
		t.Fatal(err)
	}
	// The controller detach hangs until the agent goes away.
	hang := make(chan struct{})
	drv.Script(csitest.ControllerUnpublish, csitest.Result{Block: hang})
	if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: "web-1", NodeID: "node1", ClientStatus: structs.AllocComplete}}); err != nil {
		t.Fatal(err)
	}
	waitVolume(t, c, "vol1", func(v *structs.Volume) bool {
		cl := v.Claims["web-1"]
		return cl != nil && cl.State == structs.ClaimNodeDetached
	})
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := drv.WaitFor(waitCtx, func() bool { return drv.InFlight(csitest.ControllerUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Shutdown cancelled the hanging call.
	if err := drv.WaitFor(waitCtx, func() bool { return drv.InFlight(csitest.ControllerUnpublish) == 0 }); err != nil {
		t.Fatal(err)
	}
	close(hang)

	a2, c2 := testAgent(t, dir)
	defer a2.Shutdown()
	waitVolume(t, c2, "vol1", func(v *structs.Volume) bool { return len(v.Claims) == 0 })
	if drv.Attached("disk-1", "ext-node1") {
		t.Fatal("disk still attached after the resumed release")
	}
	if n := len(drv.Calls(csitest.NodeUnpublish)); n != 1 {
		t.Fatalf("node unpublish ran %d times; the resumed release must start at node-detached", n)
	}
}
