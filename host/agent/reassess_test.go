package agent

import (
	"context"
	"testing"
	"time"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// TestModuleSwapRejudgesAtOnce (a swap re-judges what the old version
// decided): a claim the grace policy
// deferred for 30 s is judged again as soon as a generation with a 2 s
// grace is swapped in, with the clock standing still, and is released
// after about 2 s of fake time, not 30.
func TestModuleSwapRejudgesAtOnce(t *testing.T) {
	dir := t.TempDir()
	installModule(t, dir, "policy", "grace-policy", "modules-swap/policy-grace.hcl")
	e := newModuleAgent(t, dir, nil)
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	setupPlugins(t, e.c, map[string]*csitest.Server{"csi": drv})
	claimVolumes(t, e.c, map[string]string{"g-1": "csi"})
	endAllocs(t, e.c, "g-1")
	waitCond(t, "generation 1 asked", func() bool { return e.moduleStatus(t, "policy").Calls > 0 })
	calls := e.moduleStatus(t, "policy").Calls

	installModule(t, dir, "policy", "grace-policy", "modules-swap/policy-grace-2s.hcl")
	if _, err := e.c.ReloadModules(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.moduleStatus(t, "policy"); st.Generation != 2 || st.Version != "4.1.0" {
		t.Fatalf("after the swap: %+v, want generation 2 (4.1.0)", st)
	}
	waitCond(t, "generation 2 asked at once", func() bool { return e.moduleStatus(t, "policy").Calls > calls })
	if now := e.clock.Now(); !now.Equal(moduleT0) {
		t.Fatalf("the clock moved (%v) before the re-judgement", now.Sub(moduleT0))
	}
	// Step the clock half a second per poll until the claim is gone: the
	// 2 s wait must do, not the 30 s one.
	e.waitVolumes(t, "g-1 released", func(v map[string]*structs.Volume) bool { return len(v["g-1"].Claims) == 0 },
		func(map[string]*structs.Volume) {
			if e.clock.Since(moduleT0) < 20*time.Second {
				e.clock.Advance(500 * time.Millisecond)
			}
		})
	if d := e.clock.Since(moduleT0); d >= 20*time.Second {
		t.Fatalf("released only after %v of fake time: the old generation's 30 s wait held", d)
	}
	t.Logf("released after %v of fake time", e.clock.Since(moduleT0))
}
