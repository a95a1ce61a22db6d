package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestMockScriptedErrorSequence runs volhost against the csi-test v5.6.0
// gomock driver with a scripted error sequence on every release step: each
// scripted code is answered once, in order, and volhost retries through all
// of them (node step before the controller step) to a completed release.
func TestMockScriptedErrorSequence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sock, err := os.MkdirTemp("", "vh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sock)
	csiSock, ctlSock := filepath.Join(sock, "m.sock"), filepath.Join(sock, "ctl.sock")
	drv, err := Start(dir, "mockcsi", bins.Mockcsi, "-endpoint", csiSock, "-control", ctlSock, "-node-id", "mock-node-1",
		"-script", "NodeUnpublishVolume=Unavailable,Aborted;NodeUnstageVolume=Internal;ControllerUnpublishVolume=DeadlineExceeded,Unavailable,ResourceExhausted")
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Stop(5 * time.Second)
	ctl := NewControl(ctlSock)
	if err := Poll(ctx, 10*time.Millisecond, func() (bool, error) { return ctl.Ready(ctx), nil }); err != nil {
		t.Fatalf("mockcsi did not start: %v\n%s", err, drv.Tail(2000))
	}
	agent, err := StartAgent(ctx, dir, bins.Volhost, defaultWatcher)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop(10 * time.Second)
	e := &env{t: t, ctx: ctx, dir: dir, agent: agent, plugin: "mock"}
	defer func() {
		if t.Failed() {
			t.Logf("mockcsi log:\n%s\nagent log tail:\n%s", drv.Tail(4000), agent.Tail(6000))
		}
	}()

	e.cli(0, "plugin", "register", e.spec("plugin.hcl", fmt.Sprintf("plugin \"mock\" {\n  controller_endpoint = %q\n}\n", Endpoint(csiSock))))
	e.cli(0, "node", "register", e.spec("node.hcl", fmt.Sprintf("node \"node1\" {\n  status = \"ready\"\n  root_dir = %q\n  plugin \"mock\" {\n    endpoint = %q\n  }\n}\n",
		filepath.Join(dir, "root"), Endpoint(csiSock))))
	mustContain(t, "node status", e.cli(0, "node", "status", "node1"), "mock-node-1")
	e.cli(0, "volume", "register", e.spec("vol.hcl", "volume \"vol1\" {\n  external_id = \"mock-vol-1\"\n  plugin_id = \"mock\"\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n"))
	e.cli(0, "alloc", "register", e.spec("alloc.hcl", "alloc \"web-1\" {\n  node_id = \"node1\"\n  client_status = \"running\"\n}\n"))
	e.cli(0, "volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	if err := ctl.ResetCalls(ctx); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-1")
	e.waitReleased("vol1")

	r, err := ctl.Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range r.Calls {
		if c.VolumeID != "" {
			got = append(got, c.Method+":"+c.Code)
		}
	}
	want := []string{
		"NodeUnpublishVolume:Unavailable", "NodeUnpublishVolume:Aborted", "NodeUnpublishVolume:OK",
		// The unpublish's success is committed before the unstage runs
		// (the NodeUnpublished mark), so the retry of a failed unstage does
		// not repeat it.
		"NodeUnstageVolume:Internal", "NodeUnstageVolume:OK",
		"ControllerUnpublishVolume:DeadlineExceeded", "ControllerUnpublishVolume:Unavailable",
		"ControllerUnpublishVolume:ResourceExhausted", "ControllerUnpublishVolume:OK",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("calls =\n%v\nwant\n%v", got, want)
	}
	mustContain(t, "events", e.cli(0, "events"), "ready-to-free")
}
