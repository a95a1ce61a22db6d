package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/agent"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
)

// TestAgentWalkthrough runs the README walk-through with the spec files in
// testdata/ against a real dev agent and a scripted CSI plugin: register a
// plugin, a node, a volume and an allocation; claim; finish the allocation;
// the watcher releases the claim through the plugin and it disappears.
func TestAgentWalkthrough(t *testing.T) {
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "projects/demo/zones/us-central1-a/instances/node1",
		PublishUnpublish: true, StageUnstage: true})

	cfg := agent.DefaultConfig()
	cfg.Dev = true
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Watcher.BackoffBase = "10ms"
	a, err := agent.New(cfg, agent.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("agent: %v", err)
		}
	})

	deadline, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	addr := waitFor(t, deadline, "the API to listen", func() (string, bool) { return a.API.Addr(), a.API.Addr() != "" })
	e := &cliEnv{t: t, addr: "http://" + addr}
	cl, err := client.New(e.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, deadline, "leadership", func() (string, bool) {
		l, err := cl.Leader(deadline)
		return "", err == nil && l.IsLeader
	})

	// The walk-through's spec files, pointed at the scripted plugin's socket.
	dir := t.TempDir()
	spec := func(name string) string { return writeSpec(t, "testdata", dir, name, plugin.Endpoint()) }
	contains(t, "plugin register", e.ok("plugin", "register", spec("plugin.hcl")), `Registered plugin "gce-pd" (controller publish/unpublish: true)`)
	contains(t, "node register", e.ok("node", "register", spec("node.hcl")), `Registered node "node1"`)
	contains(t, "node status", e.ok("node", "status", "node1"), "projects/demo/zones/us-central1-a/instances/node1")
	e.ok("volume", "register", spec("volume.hcl"))
	e.ok("alloc", "register", spec("alloc.hcl"))
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	contains(t, "status after claim", e.ok("volume", "status", "vol1"), "web-1", "taken")
	if !plugin.Attached("projects/demo/zones/us-central1-a/disks/vol1", "projects/demo/zones/us-central1-a/instances/node1") {
		t.Errorf("the claim did not ControllerPublish the disk")
	}

	e.ok("alloc", "update", "-status", "complete", "web-1")
	e.ok("system", "gc")
	// Wait for the release with blocking queries on the volume, not sleeps.
	var index uint64
	for {
		v, meta, err := cl.Volume(deadline, "", "vol1", &client.QueryOptions{Index: index, Wait: time.Minute})
		if err != nil {
			t.Fatalf("waiting for the release: %v", err)
		}
		if len(v.Claims) == 0 {
			break
		}
		index = meta.Index
	}
	contains(t, "status after release", e.ok("volume", "status", "vol1"), "No claims")
	if plugin.Attached("projects/demo/zones/us-central1-a/disks/vol1", "projects/demo/zones/us-central1-a/instances/node1") {
		t.Errorf("the release did not ControllerUnpublish the disk")
	}
	contains(t, "events", e.ok("events"), "vol1")
	e.ok("volume", "deregister", "vol1")
}

// waitFor polls cond until it holds or ctx ends.
// writeSpec copies the spec file name from srcDir into dir with its CSI
// endpoints pointed at endpoint and its node root under dir, and returns
// the copy's path.
func writeSpec(t *testing.T, srcDir, dir, name, endpoint string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(srcDir, name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer(
		"unix:///tmp/volhost-csi/controller.sock", endpoint,
		"unix:///tmp/volhost-csi/node1.sock", endpoint,
		"/tmp/volhost-node1", filepath.Join(dir, "node1"),
	).Replace(string(b))
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor[T any](t *testing.T, ctx context.Context, what string, cond func() (T, bool)) T {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if v, ok := cond(); ok {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
