package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/pluginstest"
	"github.com/volhost/volhost/watcher"
)

// The agent's Wasm module tests: one process, the agent with
// -module-dir over example modules, scripted CSI drivers, and a fake clock
// that drives the watcher's backoffs, the escape hatch's "after", the
// grace period and the module runtime's breaker and debounce (the directory
// watch never fires unless the clock moves, so reloads here are explicit).
//
// Modules are built once per test binary from examples/plugins and compiled
// through the wazero cache every package shares (plugins/pluginstest): only
// default-policy, fault-policy (every runtime fault; the variants are its
// bytes), fault-version and grace-policy.

// installModule writes dir/NAME.wasm (example's bytes) and dir/NAME.hcl
// (testdata/manifest), each by rename like a deploy tool would.
func installModule(tb testing.TB, dir, name, example, manifest string) {
	tb.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", manifest))
	if err != nil {
		tb.Fatal(err)
	}
	pluginstest.Install(tb, dir, name, pluginstest.Wasm(tb, example), string(src))
}

// moduleEnv is an agent serving a module directory on a fake clock.
type moduleEnv struct {
	a     *Agent
	c     *client.Client
	clock *clockwork.FakeClock
	dir   string
}

var moduleT0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// newModuleAgent starts a dev agent over dir (already filled), with a 1 s
// backoff, three attempts before a volume is stuck, and tweak applied.
func newModuleAgent(t *testing.T, dir string, tweak func(*Config)) *moduleEnv {
	t.Helper()
	cfg := localConfig()
	cfg.ModuleDir = dir
	cfg.ModuleCacheDir = pluginstest.CacheDir()
	cfg.Watcher.BackoffBase = "1s"
	cfg.Watcher.BackoffMax = "1s"
	cfg.Watcher.MaxAttempts = 3
	if tweak != nil {
		tweak(cfg)
	}
	e := &moduleEnv{clock: clockwork.NewFakeClockAt(moduleT0), dir: dir}
	e.a, e.c = startAgent(t, cfg, Options{Clock: e.clock,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: hclog.DefaultOutput})})
	t.Cleanup(func() {
		if err := e.a.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	for _, st := range e.a.Modules.Status() {
		if st.State != plugins.StateServing {
			t.Fatalf("module %s is %s: %s", st.Name, st.State, st.Refusal)
		}
	}
	return e
}

// waitVolumes follows the default namespace's volumes with blocking queries
// until cond holds, calling step (e.g. a clock advance) with every answer
// that does not satisfy it. The query's short wait bounds how long a step
// that changes nothing takes to be retried; it decides no outcome.
func (e *moduleEnv) waitVolumes(t *testing.T, what string, cond func(map[string]*structs.Volume) bool, step func(map[string]*structs.Volume)) map[string]*structs.Volume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var index uint64
	for {
		vols, meta, err := e.c.Volumes(ctx, "default", "", &client.QueryOptions{Index: index, Wait: 100 * time.Millisecond})
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		byID := make(map[string]*structs.Volume, len(vols))
		for _, v := range vols {
			byID[v.ID] = v
		}
		if cond(byID) {
			return byID
		}
		index = meta.Index
		if step != nil {
			step(byID)
		}
	}
}

// advanceToNextAttempts moves the fake clock to the latest next attempt of
// the volumes' claims, but only when every claim's next attempt is in the
// future: a claim due now has a pass running or queued, which must happen
// before time moves again.
func advanceToNextAttempts(clock *clockwork.FakeClock, vols map[string]*structs.Volume, ids []string) {
	now := clock.Now()
	latest := now
	for _, id := range ids {
		v := vols[id]
		if v == nil {
			continue
		}
		for _, c := range v.Claims {
			if !c.NextAttempt.After(now) {
				return
			}
			if c.NextAttempt.After(latest) {
				latest = c.NextAttempt
			}
		}
	}
	if latest.After(now) {
		clock.Advance(latest.Sub(now))
	}
}

// metric reads one series' value from GET /v1/metrics (0 when absent).
func (e *moduleEnv) metric(t *testing.T, series string) float64 {
	t.Helper()
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
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// setupPlugins registers a CSI plugin per driver on node1 (which runs every
// plugin's node service).
func setupPlugins(t testing.TB, c *client.Client, drivers map[string]*csitest.Server) {
	t.Helper()
	ctx := context.Background()
	nps := map[string]*structs.NodePlugin{}
	for id, drv := range drivers {
		if _, err := c.RegisterPlugin(ctx, &structs.Plugin{ID: id, ControllerEndpoint: drv.Endpoint()}); err != nil {
			t.Fatal(err)
		}
		nps[id] = &structs.NodePlugin{Endpoint: drv.Endpoint()}
	}
	if _, err := c.RegisterNode(ctx, &structs.Node{ID: "node1", RootDir: t.TempDir(), Plugins: nps}); err != nil {
		t.Fatal(err)
	}
}

// claimVolumes registers volumes (ID -> plugin), a running allocation
// a-ID for each, and claims each volume for its allocation (publishing it),
// with a few requests in flight at once.
func claimVolumes(t testing.TB, c *client.Client, vols map[string]string) {
	t.Helper()
	ctx := context.Background()
	var regs []*structs.Volume
	var allocs []*structs.Alloc
	for id, plugin := range vols {
		regs = append(regs, &structs.Volume{ID: id, ExternalID: "disk-" + id, PluginID: plugin,
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
		allocs = append(allocs, &structs.Alloc{ID: "a-" + id, NodeID: "node1", ClientStatus: structs.AllocRunning})
	}
	if _, err := c.RegisterVolumes(ctx, regs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpsertAllocs(ctx, allocs); err != nil {
		t.Fatal(err)
	}
	ids := make(chan string)
	errs := make(chan error, len(vols))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				req := &structs.ClaimRequest{VolumeID: id, AllocID: "a-" + id, NodeID: "node1", Mode: structs.ClaimWrite}
				_, err := c.ClaimVolume(ctx, req)
				// A claim answered 503 sent nothing (the leader could not
				// confirm its lease, dev mode's 100 ms on a loaded machine):
				// a scheduler sends it again, and so does this.
				for try := 1; errors.Is(err, structs.ErrNoLeader) && try < 5; try++ {
					_, err = c.ClaimVolume(ctx, req)
				}
				if err != nil {
					errs <- fmt.Errorf("claim %s: %w", id, err)
				}
			}
		}()
	}
	for id := range vols {
		ids <- id
	}
	close(ids)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// endAllocs marks the volumes' allocations complete.
func endAllocs(t testing.TB, c *client.Client, ids ...string) {
	t.Helper()
	var allocs []*structs.Alloc
	for _, id := range ids {
		allocs = append(allocs, &structs.Alloc{ID: "a-" + id, NodeID: "node1", ClientStatus: structs.AllocComplete})
	}
	if _, err := c.UpsertAllocs(context.Background(), allocs); err != nil {
		t.Fatal(err)
	}
}

// unpublished counts ControllerUnpublish calls per driver volume ID.
func unpublished(drv *csitest.Server) map[string]int {
	out := map[string]int{}
	for _, c := range drv.Calls(csitest.ControllerUnpublish) {
		out[c.VolumeID]++
	}
	return out
}

// faultCases are the faulty example modules and the fault kind each must
// leave in the claim's last error and the stuck mark.
var faultCases = []struct {
	mode  string
	fault plugins.FaultKind
}{
	{"panic", plugins.FaultGuestError},
	{"trap", plugins.FaultTrap},
	{"spin", plugins.FaultTimeout},
	{"oom", plugins.FaultOOM},
	{"malformed", plugins.FaultBadOutput},
	{"stranger", plugins.FaultBadOutput},
}

// TestModuleFaultsIsolated: with each faulty module installed for one volume
// of plugin "bad" (volume selectors) and the default-policy module serving
// the rest, plugin "good"'s volumes are released normally, before and after
// the bad ones fail; each bad volume is never released (no CSI call), and is
// stuck after max_attempts with its module, version and fault kind in the
// stuck mark and the claim's last error. With the escape hatch on, the
// stuck volumes are force-deregistered once stuck for `after`, leaving
// leftovers and an auto-force-deregister event; with it off they stay
// stuck and `volume deregister -force` by hand succeeds.
func TestModuleFaultsIsolated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hatch bool
	}{
		{"escape-hatch-on", true},
		{"escape-hatch-off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			installModule(t, dir, "default-policy", "default-policy", "modules-faults/default-policy.hcl")
			for _, f := range faultCases {
				installModule(t, dir, "fault-"+f.mode, "fault-policy", "modules-faults/fault-"+f.mode+".hcl")
			}
			const after = 15 * time.Minute
			e := newModuleAgent(t, dir, func(cfg *Config) {
				cfg.EscapeHatch.AutoForceDeregister = tc.hatch
				cfg.EscapeHatch.After = after.String()
			})
			good := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
			bad := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
			setupPlugins(t, e.c, map[string]*csitest.Server{"good": good, "bad": bad})
			vols := map[string]string{"good-1": "good", "good-2": "good", "good-3": "good"}
			var badIDs []string
			for _, f := range faultCases {
				vols["bad-"+f.mode] = "bad"
				badIDs = append(badIDs, "bad-"+f.mode)
			}
			claimVolumes(t, e.c, vols)
			for id, info := range map[string]string{"good-1": "default-policy", "bad-trap": "fault-trap"} {
				mi, err := e.a.ModuleInfo(info, 1000)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, r := range mi.ServedVolumes {
					found = found || r.ID == id
				}
				if !found {
					t.Fatalf("module %s does not report serving %s: %+v", info, id, mi.ServedVolumes)
				}
				// The index walk agrees with the real manager's Match asked
				// about every volume.
				all, err := e.a.Store.Snapshot().Volumes(nil)
				if err != nil {
					t.Fatal(err)
				}
				var want []structs.VolumeRef
				for _, v := range all {
					if name, ok := e.a.Modules.Match(abi.Kind(mi.Kind), targetOf(v)); ok && name == info {
						want = append(want, structs.VolumeRef{Namespace: v.Namespace, ID: v.ID})
					}
				}
				if mi.ServedVolumeCount != len(want) || !slices.Equal(mi.ServedVolumes, want) {
					t.Fatalf("module %s serves %d %v, Match over every volume says %d %v", info, mi.ServedVolumeCount, mi.ServedVolumes, len(want), want)
				}
			}

			// Every allocation ends at once: the good volumes are released
			// without the clock moving (no retry needed), whatever the bad
			// modules do meanwhile.
			endAllocs(t, e.c, append([]string{"good-1", "good-2"}, badIDs...)...)
			e.waitVolumes(t, "good volumes released", func(v map[string]*structs.Volume) bool {
				return len(v["good-1"].Claims) == 0 && len(v["good-2"].Claims) == 0
			}, nil)

			// The bad volumes fail each attempt and back off; the clock
			// moves only when all of them wait for it, and only as far as
			// their latest next attempt, so fake time never runs ahead of
			// the passes (it must not reach `after` early).
			step := func(v map[string]*structs.Volume) { advanceToNextAttempts(e.clock, v, badIDs) }
			vs := e.waitVolumes(t, "bad volumes stuck", func(v map[string]*structs.Volume) bool {
				for _, id := range badIDs {
					if v[id] == nil || v[id].Stuck == nil {
						return false
					}
				}
				return true
			}, step)
			for _, f := range faultCases {
				id, mod := "bad-"+f.mode, "fault-"+f.mode
				v := vs[id]
				s, c := v.Stuck, v.Claims["a-"+id]
				if s.Reason != watcher.ReasonMaxAttempts || s.Module != mod || s.Fault != string(f.fault) || s.Attempts != 3 || s.AllocID != "a-"+id {
					t.Errorf("%s: stuck = %+v, want max attempts, module %s, fault %s, 3 attempts", id, s, mod, f.fault)
				}
				if c == nil || c.State != structs.ClaimTaken || c.LastError == nil {
					t.Fatalf("%s: claim = %+v, want taken with a last error", id, c)
				}
				le := c.LastError
				// Past threshold faults the breaker opens (fail fast, still a
				// fault of this module); the first three are the module's own.
				if le.Kind != structs.ErrorModule || le.Module != mod || le.ModuleVersion != "1.0.0" ||
					(le.Fault != string(f.fault) && le.Fault != string(plugins.FaultOpenCircuit)) {
					t.Errorf("%s: last error = %+v, want module %s 1.0.0 fault %s", id, le, mod, f.fault)
				}
			}
			// Metrics: each module's faults by kind, and the stuck marks.
			for _, f := range faultCases {
				series := fmt.Sprintf(`volhost_module_faults_total{fault=%q,module="fault-%s"}`, f.fault, f.mode)
				if n := e.metric(t, series); n < 3 {
					t.Errorf("%s = %v, want >= 3", series, n)
				}
			}
			if n := e.metric(t, "volhost_volumes_marked_stuck_total"); n < float64(len(badIDs)) {
				t.Errorf("volumes_marked_stuck_total = %v, want >= %d", n, len(badIDs))
			}
			if n := len(bad.Calls(csitest.ControllerUnpublish)) + len(bad.Calls(csitest.NodeUnpublish)); n != 0 {
				t.Fatalf("%d release calls reached the bad plugin's driver: a faulted decision released a claim", n)
			}

			// The watcher still serves everyone else.
			endAllocs(t, e.c, "good-3")
			e.waitVolumes(t, "good-3 released after the faults", func(v map[string]*structs.Volume) bool {
				return len(v["good-3"].Claims) == 0
			}, nil)
			if got := unpublished(good); got["disk-good-1"] != 1 || got["disk-good-2"] != 1 || got["disk-good-3"] != 1 {
				t.Fatalf("good driver's controller unpublish calls = %v, want one per volume", got)
			}

			// moreAttempts waits for a failed attempt past the ones in
			// prev on every bad volume (after a clock advance that made
			// every one due): proof the watcher looked at each. None may be
			// gone before `after`, nor ever with the escape hatch off.
			moreAttempts := func(what string, prev map[string]*structs.Volume) map[string]*structs.Volume {
				return e.waitVolumes(t, what, func(v map[string]*structs.Volume) bool {
					for _, id := range badIDs {
						if v[id] == nil {
							t.Fatalf("%s: %s deregistered", what, id)
						}
						if v[id].Claims["a-"+id].Attempts <= prev[id].Claims["a-"+id].Attempts {
							return false
						}
					}
					return true
				}, nil)
			}
			stuckSince := vs[badIDs[0]].Stuck.Since
			for _, id := range badIDs {
				if s := vs[id].Stuck.Since; s.Before(stuckSince) {
					stuckSince = s
				}
			}
			// A minute before the first of them has been stuck for `after`:
			// all still there. (They were marked within seconds.)
			e.clock.Advance(stuckSince.Add(after - time.Minute).Sub(e.clock.Now()))
			vs = moreAttempts("a pass a minute before `after`", vs)

			// Stuck for longer than `after`.
			e.clock.Advance(2 * time.Minute)
			ctx := context.Background()
			if tc.hatch {
				e.waitVolumes(t, "stuck volumes force-deregistered", func(v map[string]*structs.Volume) bool {
					for _, id := range badIDs {
						if v[id] != nil {
							return false
						}
					}
					return true
				}, nil)
				leftovers, _, err := e.c.Leftovers(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]*structs.Leftover{}
				for _, l := range leftovers {
					got[l.VolumeID] = l
				}
				for _, id := range badIDs {
					l := got[id]
					if l == nil || l.AllocID != "a-"+id || l.PluginID != "bad" || l.State != structs.ClaimTaken || l.ExternalID != "disk-"+id || l.Reason != "escape-hatch" {
						t.Errorf("%s: leftover = %+v, want the taken claim of a-%s by the escape hatch", id, l, id)
					}
				}
				// The counter moves after the deregistration commits, so
				// seeing the volumes gone does not mean it has moved yet
				// (a CI run read 5 of 6).
				testutil.WaitFor(t, "auto_force_deregisters_total to count every forced volume", func() bool {
					return e.metric(t, "volhost_auto_force_deregisters_total") == float64(len(badIDs))
				})
				events, _, err := e.c.Events(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				auto := map[string]bool{}
				for _, ev := range events {
					if ev.Type == structs.EventAutoForce {
						auto[ev.VolumeID] = true
					}
				}
				for _, id := range badIDs {
					if !auto[id] {
						t.Errorf("no %s event for %s", structs.EventAutoForce, id)
					}
				}
				return
			}

			// Off: the volumes stay stuck however long.
			moreAttempts("a pass after `after` with the escape hatch off", vs)
			for _, id := range badIDs {
				resp, _, err := e.c.Volume(ctx, "default", id, nil)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Volume.Stuck == nil {
					t.Fatalf("%s no longer stuck", id)
				}
				dr, err := e.c.DeregisterVolume(ctx, "default", id, true)
				if err != nil {
					t.Fatalf("force deregister %s by hand: %v", id, err)
				}
				if len(dr.Leftovers) != 1 || dr.Leftovers[0].AllocID != "a-"+id {
					t.Fatalf("force deregister %s: leftovers = %+v", id, dr.Leftovers)
				}
			}
			e.waitVolumes(t, "bad volumes gone", func(v map[string]*structs.Volume) bool {
				for _, id := range badIDs {
					if v[id] != nil {
						return false
					}
				}
				return true
			}, nil)
			if leftovers, _, err := e.c.Leftovers(ctx, nil); err != nil || len(leftovers) != len(badIDs) {
				t.Fatalf("leftovers = %d (%v), want %d", len(leftovers), err, len(badIDs))
			}
		})
	}
}

// lastSeq is the highest call sequence number the driver has recorded.
func lastSeq(drv *csitest.Server) int {
	n := 0
	for _, c := range drv.AllCalls() {
		n = max(n, c.Seq)
	}
	return n
}

// moduleStatus reads a module's status through the API (`module status`).
func (e *moduleEnv) moduleStatus(t *testing.T, name string) plugins.Status {
	t.Helper()
	mi, err := e.c.Module(context.Background(), name)
	if err != nil {
		t.Fatalf("module status %s: %v", name, err)
	}
	return mi.Status
}

// moduleEventKinds lists the recorded module events of a module.
func (e *moduleEnv) moduleEventKinds(t *testing.T, module string) []string {
	t.Helper()
	events, _, err := e.c.Events(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range events {
		if ev.Type == structs.EventModule && ev.Module == module {
			out = append(out, ev.Fields["event"])
		}
	}
	return out
}

// waitCond polls cond (state with no blocking query: module statistics,
// recorded events) until it holds or a deadline passes.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-time.After(2 * time.Millisecond)
	}
}

// TestModuleHotSwapWhileReleasing: 1,000 claims are released in ten waves
// while the policy module is replaced good -> bad -> good. The bad version
// (ABI version 99) is refused with its reason in `module status` while the
// good one keeps serving; the second good version is swapped in. No call is
// lost (every claim ends released, each volume detached exactly once), none
// is released against policy (no release call for a volume before its
// allocation ended; the volumes whose allocations run are never touched),
// and no release attempt fails across the swaps.
func TestModuleHotSwapWhileReleasing(t *testing.T) {
	const releases, waves, live = 1000, 10, 20
	dir := t.TempDir()
	installModule(t, dir, "policy", "default-policy", "modules-swap/policy-good.hcl")
	// The driver takes concurrent controller calls (the default of one
	// at a time per plugin would make this a test of the driver's speed).
	e := newModuleAgent(t, dir, func(cfg *Config) { cfg.Watcher.ControllerConcurrency = 16 })
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	setupPlugins(t, e.c, map[string]*csitest.Server{"csi": drv})
	vols := map[string]string{}
	var ids []string
	for i := range releases {
		id := fmt.Sprintf("r-%04d", i)
		vols[id] = "csi"
		ids = append(ids, id)
	}
	for i := range live {
		vols[fmt.Sprintf("live-%02d", i)] = "csi"
	}
	start := time.Now()
	claimVolumes(t, e.c, vols)
	t.Logf("phase: claimed %v", time.Since(start))
	ctx := context.Background()

	// seqBefore[id]: the driver's last call before id's allocation ended;
	// any release call for id must come after it.
	seqBefore := map[string]int{}
	per := releases / waves
	for w := range waves {
		switch w {
		case 3: // bad: refused, the serving generation stays
			installModule(t, dir, "policy", "fault-version", "modules-swap/policy-bad.hcl")
			if _, err := e.c.ReloadModules(ctx); err != nil {
				t.Fatal(err)
			}
			st := e.moduleStatus(t, "policy")
			if st.State != plugins.StateServing || st.Generation != 1 || st.Version != "1.0.0" ||
				!strings.Contains(st.Refusal, "99") {
				t.Fatalf("after the bad version: status = %+v, want generation 1 (1.0.0) serving and a refusal naming ABI version 99", st)
			}
		case 7: // good again: swapped in
			installModule(t, dir, "policy", "default-policy", "modules-swap/policy-good2.hcl")
			if _, err := e.c.ReloadModules(ctx); err != nil {
				t.Fatal(err)
			}
			st := e.moduleStatus(t, "policy")
			if st.State != plugins.StateServing || st.Generation != 2 || st.Version != "3.0.0" || st.Refusal != "" {
				t.Fatalf("after the good version: status = %+v, want generation 2 (3.0.0) serving, no refusal", st)
			}
		}
		batch := ids[w*per : (w+1)*per]
		seq := lastSeq(drv)
		for _, id := range batch {
			seqBefore["disk-"+id] = seq
		}
		endAllocs(t, e.c, batch...)
	}

	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := drv.WaitFor(waitCtx, func() bool { return len(drv.Calls(csitest.ControllerUnpublish)) >= releases }); err != nil {
		t.Fatalf("controller unpublish calls: %d of %d: %v", len(drv.Calls(csitest.ControllerUnpublish)), releases, err)
	}
	t.Logf("phase: detached %v", time.Since(start))
	vs := e.waitVolumes(t, "every claim released", func(v map[string]*structs.Volume) bool {
		for _, id := range ids {
			if len(v[id].Claims) != 0 {
				return false
			}
		}
		return true
	}, nil)
	for id, v := range vs {
		if strings.HasPrefix(id, "live-") {
			if c := v.Claims["a-"+id]; c == nil || c.State != structs.ClaimTaken || c.Attempts != 0 {
				t.Errorf("%s: claim of a running allocation = %+v, want taken and never attempted", id, c)
			}
		}
	}
	detached := unpublished(drv)
	for _, id := range ids {
		if detached["disk-"+id] != 1 {
			t.Errorf("%s detached %d times, want once", id, detached["disk-"+id])
		}
	}
	for _, c := range drv.AllCalls() {
		switch c.Method {
		case csitest.NodeUnpublish, csitest.NodeUnstage, csitest.ControllerUnpublish:
			before, ok := seqBefore[c.VolumeID]
			if !ok {
				t.Errorf("release call %s for %s, whose allocation runs", c.Method, c.VolumeID)
			} else if c.Seq <= before {
				t.Errorf("release call %s (#%d) for %s before its allocation ended (#%d)", c.Method, c.Seq, c.VolumeID, before)
			}
		}
	}
	st := e.moduleStatus(t, "policy")
	if st.Calls < releases || len(st.Faults) != 0 {
		t.Fatalf("policy module: %d calls, faults %v; want >= %d calls (every release decided by Wasm), no faults", st.Calls, st.Faults, releases)
	}
	events, _, err := e.c.Events(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if ev.Type == structs.EventClaimFailed || ev.Type == structs.EventVolumeStuck {
			t.Fatalf("release attempt failed across the swaps: %+v", ev)
		}
	}
	t.Logf("phase: checked %v", time.Since(start))
	waitCond(t, "module events recorded", func() bool {
		return strings.Join(e.moduleEventKinds(t, "policy"), ",") == "loaded,refused,swapped"
	})
	t.Logf("phase: events %v", time.Since(start))
}

// releaseEvent reports whether a claim of the volume has been recorded
// released (a claim-transition event to ready-to-free).
func releaseEvent(t *testing.T, e *moduleEnv, volume string) bool {
	t.Helper()
	events, _, err := e.c.Events(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		if ev.Type == structs.EventClaimTransition && ev.VolumeID == volume && strings.Contains(ev.Message, "released") {
			return true
		}
	}
	return false
}

// TestModuleSwapToGracePolicy: under the default-policy module a claim is
// released as soon as its allocation ends; after the module is swapped to
// grace-policy (grace = "30s") the next one waits: the policy is asked and
// the claim stays taken at 29 s, with no release event, and is released
// (claim removed, release event recorded) once 30 s have passed.
func TestModuleSwapToGracePolicy(t *testing.T) {
	dir := t.TempDir()
	installModule(t, dir, "policy", "default-policy", "modules-swap/policy-good.hcl")
	e := newModuleAgent(t, dir, nil)
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	setupPlugins(t, e.c, map[string]*csitest.Server{"csi": drv})
	claimVolumes(t, e.c, map[string]string{"g-1": "csi", "g-2": "csi"})
	ctx := context.Background()

	// Default policy: released with the clock standing still.
	start := time.Now()
	endAllocs(t, e.c, "g-1")
	e.waitVolumes(t, "g-1 released at once", func(v map[string]*structs.Volume) bool { return len(v["g-1"].Claims) == 0 }, nil)
	if !releaseEvent(t, e, "g-1") {
		t.Fatal("no release event for g-1")
	}
	t.Logf("phase: g-1 released %v", time.Since(start))

	installModule(t, dir, "policy", "grace-policy", "modules-swap/policy-grace.hcl")
	if _, err := e.c.ReloadModules(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.moduleStatus(t, "policy"); st.Generation != 2 || st.Version != "4.0.0" {
		t.Fatalf("after the swap: status = %+v, want generation 2 (4.0.0)", st)
	}
	t.Logf("phase: swapped %v", time.Since(start))
	calls := e.moduleStatus(t, "policy").Calls
	endAllocs(t, e.c, "g-2")
	asked := func(what string) {
		t.Helper()
		waitCond(t, what, func() bool { return e.moduleStatus(t, "policy").Calls > calls })
		calls = e.moduleStatus(t, "policy").Calls
		vs := e.waitVolumes(t, "g-2", func(map[string]*structs.Volume) bool { return true }, nil)
		if c := vs["g-2"].Claims["a-g-2"]; c == nil || c.State != structs.ClaimTaken || c.Attempts != 0 {
			t.Fatalf("%s: claim = %+v, want taken, waiting without a failed attempt", what, c)
		}
		for _, c := range drv.AllCalls() {
			if c.VolumeID == "disk-g-2" && (c.Method == csitest.NodeUnpublish || c.Method == csitest.ControllerUnpublish) {
				t.Fatalf("%s: %s for g-2 during its grace", what, c.Method)
			}
		}
		if releaseEvent(t, e, "g-2") {
			t.Fatalf("%s: a release event for g-2 during its grace", what)
		}
		t.Logf("phase: %s %v", what, time.Since(start))
	}
	asked("grace-policy asked when the allocation ended")
	e.clock.Advance(29 * time.Second)
	if _, err := e.c.SystemGC(ctx); err != nil { // a pass at 29 s
		t.Fatal(err)
	}
	asked("grace-policy asked again at 29 s")
	e.clock.Advance(2 * time.Second) // the wait's wake-up at 30 s fires
	e.waitVolumes(t, "g-2 released after its grace", func(v map[string]*structs.Volume) bool { return len(v["g-2"].Claims) == 0 }, nil)

	if !releaseEvent(t, e, "g-2") {
		t.Fatal("no release event for g-2 after its grace")
	}
	t.Logf("phase: released after grace %v", time.Since(start))
	waitCond(t, "swap event recorded", func() bool {
		return strings.Join(e.moduleEventKinds(t, "policy"), ",") == "loaded,swapped"
	})
	t.Logf("phase: events %v", time.Since(start))
}
