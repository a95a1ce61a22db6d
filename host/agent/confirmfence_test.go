package agent

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// ABI 1.1 against a real dev server and node agent: the node's agent is
// killed, the node goes down after the heartbeat TTL, and the volume's
// adapter module (fence-adapter, which lists the node's instance as
// terminated in its config) confirms the fence. The fence is committed
// naming the module, audited, and the claim skips its node steps with the
// module-fence metric label; no operator acts.
func TestNodeAgentModuleConfirmsFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	pluginstest.Install(t, dir, "fence-adapter", pluginstest.Wasm(t, "fence-adapter"), `kind = "csi-adapter"
version = "1.1.0"
plugin_ids = ["csi"]
limits {
  memory_pages = 256
  call_timeout = "5s"
  pool_size    = 1
}
config = { terminated = "ext-node1" }
`)
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	clk := clockwork.NewFakeClock()
	r := newAgentRigWith(t, ctx, clk, drv, t.TempDir(), func(cfg *Config) {
		cfg.ModuleDir, cfg.ModuleCacheDir = dir, pluginstest.CacheDir()
	})
	c := r.c
	if st, ok := r.a.Modules.StatusOf("fence-adapter"); !ok || st.ABI != "1.1" {
		t.Fatalf("fence-adapter status %+v", st)
	}

	r.claim("a1")
	r.stopAgent()
	testutil.WaitForCtx(t, ctx, "node1 down after the heartbeat TTL", func() bool {
		clk.Advance(10 * time.Second)
		n, _, err := c.Node(ctx, "node1", nil)
		return err == nil && n.Status == structs.NodeDown && n.HeartbeatLost
	})
	r.end("a1")
	waitVolume(t, c, "vol1", func(v *structs.Volume) bool { return len(v.Claims) == 0 })

	n, _, err := c.Node(ctx, "node1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.Fence == nil || n.Fence.Source != "module:fence-adapter@1.1.0" || !strings.Contains(n.Fence.Reason, "ext-node1") {
		t.Fatalf("node1 fence = %+v, want one by module fence-adapter", n.Fence)
	}
	if u, cu := len(drv.Calls(csitest.NodeUnpublish)), len(drv.Calls(csitest.ControllerUnpublish)); u != 0 || cu != 1 {
		t.Fatalf("%d NodeUnpublish, %d ControllerUnpublish; want 0 and 1", u, cu)
	}
	evs, _, err := c.Events(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fenceEvent, audited, reason bool
	for _, e := range evs {
		switch {
		case e.Type == structs.EventNodeFence && e.Fields["source"] == "module:fence-adapter@1.1.0":
			fenceEvent = true
		case e.Type == structs.EventAudit && e.Fields["action"] == "node-fence" && e.Fields["accessor"] == "module:fence-adapter@1.1.0":
			audited = true
		case e.AllocID == "a1" && strings.Contains(e.Fields["fence_reason"]+e.Message, "module:fence-adapter@1.1.0"):
			reason = true
		}
	}
	if !fenceEvent || !audited || !reason {
		t.Fatalf("events: fence %v, audit %v, claim's fence reason %v", fenceEvent, audited, reason)
	}
	resp, err := http.Get("http://" + r.a.HTTPAddr() + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `volhost_forced_detaches_total{reason="module-fence"} 1`) {
		t.Error("volhost_forced_detaches_total did not count the module's forced detach")
	}
	// The release's checkpoints went through the group commit, which the
	// agent wires to its metrics.
	if m := regexp.MustCompile(`(?m)^volhost_checkpoint_commit_duration_seconds_count (\d+)$`).FindStringSubmatch(string(body)); m == nil || m[1] == "0" {
		t.Errorf("volhost_checkpoint_commit_duration_seconds_count: %v, want the release's group commits counted", m)
	}
}
