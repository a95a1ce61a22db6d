package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/pluginstest"
)

const rolloutServing = `kind = "release-policy"
version = "1.0.0"
default = true
limits {
  call_timeout = "5s"
  pool_size = 2
}
`

// The candidate: fault-policy, deciding like the default policy except on
// volumes whose context names a fault mode. When it faults while serving,
// the last known good answers (on_failure), so no release fails.
const rolloutCandidate = `kind = "release-policy"
version = "2.0.0"
default = true
mode = "shadow"
on_failure = "last_known_good"
limits {
  call_timeout = "5s"
  pool_size = 2
}
rollback {
  max_faults = 3
  window = "1m"
}
`

// claimWithContext registers volumes with their contexts, a running
// allocation a-ID each, and claims them on node1.
func claimWithContext(t *testing.T, c *client.Client, vols map[string]map[string]string) {
	t.Helper()
	ctx := context.Background()
	for id, vctx := range vols {
		if _, err := c.RegisterVolumes(ctx, []*structs.Volume{{ID: id, ExternalID: "disk-" + id, PluginID: "csi",
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem, Context: vctx}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: "a-" + id, NodeID: "node1", ClientStatus: structs.AllocRunning}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: id, AllocID: "a-" + id, NodeID: "node1", Mode: structs.ClaimWrite}); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *moduleEnv) waitReleased(t *testing.T, ids ...string) {
	t.Helper()
	e.waitVolumes(t, fmt.Sprintf("claims of %v released", ids), func(vols map[string]*structs.Volume) bool {
		for _, id := range ids {
			if v := vols[id]; v == nil || len(v.Claims) > 0 {
				return false
			}
		}
		return true
	}, nil)
}

// TestShadowPromoteFaultAutoRollback is the module rollout end to end on
// one agent: a shadow candidate disagrees on 1 of 3 volumes being
// released and never acts; it is promoted; it faults on the next volumes,
// whose releases the last known good decides; past its rollback limit it
// is rolled back automatically. No release fails throughout.
func TestShadowPromoteFaultAutoRollback(t *testing.T) {
	dir := t.TempDir()
	pluginstest.Install(t, dir, "policy", pluginstest.Wasm(t, "default-policy"), rolloutServing)
	e := newModuleAgent(t, dir, nil)
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	setupPlugins(t, e.c, map[string]*csitest.Server{"csi": drv})
	ctx := context.Background()

	// Shadow: the candidate's files in the module directory, mode = "shadow".
	pluginstest.Install(t, dir, "policy", pluginstest.Wasm(t, "fault-policy"), rolloutCandidate)
	if _, err := e.c.ReloadModules(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.moduleStatus(t, "policy"); st.Version != "1.0.0" || st.Shadow == nil || st.Shadow.Version != "2.0.0" {
		t.Fatalf("after the shadow reload: %+v", st)
	}
	first := map[string]map[string]string{"s1": nil, "s2": {"fault.mode": "error"}, "s3": nil}
	claimWithContext(t, e.c, first)
	endAllocs(t, e.c, "s1", "s2", "s3")
	e.waitReleased(t, "s1", "s2", "s3") // the serving default policy released all three

	st := e.moduleStatus(t, "policy")
	if sh := st.Shadow; sh == nil || sh.Calls < 3 || sh.Disagreements != 1 || sh.AgreementPercent >= 100 {
		t.Fatalf("shadow status %+v: want one disagreement over the three volumes", st.Shadow)
	}
	if !strings.Contains(st.Shadow.LastDisagreement, "s2") || !strings.Contains(st.Shadow.LastDisagreement, "guest-error") {
		t.Fatalf("the disagreement does not show both answers for s2: %q", st.Shadow.LastDisagreement)
	}
	if got := e.metric(t, `volhost_module_shadow_disagreements_total{module="policy"}`); got != 1 {
		t.Fatalf("volhost_module_shadow_disagreements_total = %v, want 1", got)
	}
	waitCond(t, "the disagreement event", func() bool {
		for _, k := range e.moduleEventKinds(t, "policy") {
			if k == string(plugins.EventShadowDisagreed) {
				return true
			}
		}
		return false
	})

	// Promote: the candidate serves, the default policy is the last known good.
	if st, err := e.c.PromoteModule(ctx, "policy", plugins.PromoteOptions{}); err != nil || st.Version != "2.0.0" || st.LastKnownGood == nil {
		t.Fatalf("promote: %+v, %v", st, err)
	}
	// Make it fault: three volumes whose context makes it trap.
	second := map[string]map[string]string{}
	for _, id := range []string{"t1", "t2", "t3"} {
		second[id] = map[string]string{"fault.mode": "trap"}
	}
	claimWithContext(t, e.c, second)
	endAllocs(t, e.c, "t1", "t2", "t3")
	e.waitReleased(t, "t1", "t2", "t3") // decided by the last known good

	st = e.moduleStatus(t, "policy")
	if st.Version != "1.0.0" || st.Promoted || !strings.Contains(st.Refusal, "automatically: 3 faults") {
		t.Fatalf("after the promoted generation's faults: %+v, want an automatic rollback to 1.0.0", st)
	}
	if got := e.metric(t, `volhost_module_rollbacks_total{module="policy"}`); got != 1 {
		t.Fatalf("volhost_module_rollbacks_total = %v, want 1", got)
	}
	waitCond(t, "the rollback event", func() bool {
		for _, k := range e.moduleEventKinds(t, "policy") {
			if k == string(plugins.EventRolledBack) {
				return true
			}
		}
		return false
	})
	// Zero failed releases: no failed attempt anywhere, and every one of
	// the six volumes was detached once.
	if failed := e.metricSum(t, "volhost_claim_release_failures_total"); failed != 0 {
		t.Fatalf("%v failed release attempts, want 0", failed)
	}
	if got := e.metric(t, "volhost_claims_released_total"); got != 6 {
		t.Fatalf("volhost_claims_released_total = %v, want 6", got)
	}
	for id, n := range unpublished(drv) {
		if n != 1 {
			t.Fatalf("volume %s unpublished %d times", id, n)
		}
	}
	if len(unpublished(drv)) != 6 {
		t.Fatalf("unpublished %v, want the six volumes", unpublished(drv))
	}
	// A reload does not bring the rolled-back files back.
	if _, err := e.c.ReloadModules(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.moduleStatus(t, "policy"); st.Version != "1.0.0" || st.Shadow != nil {
		t.Fatalf("after a reload: %+v", st)
	}
}

// metricSum adds every series of a metric family (0 when absent).
func (e *moduleEnv) metricSum(t *testing.T, family string) float64 {
	t.Helper()
	total := 0.0
	resp, err := http.Get("http://" + e.a.HTTPAddr() + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, family+"{") || strings.HasPrefix(line, family+" ") {
			var v float64
			if _, err := fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			total += v
		}
	}
	return total
}
