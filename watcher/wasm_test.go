package watcher

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// Wasm modules in the watcher's tests come from examples/plugins, built
// once per test binary and compiled through the wazero cache every package
// shares (plugins/pluginstest): compiling a module under -race costs ~19 s
// cold and ~0.4 s cached, so the tests here use only default-policy,
// fault-policy (one module for every runtime fault: the variants are the
// same bytes) and, in benchmarks, gcepd-adapter.

// moduleFile is one module to install: NAME.wasm built from example, with
// manifest as NAME.hcl.
type moduleFile struct {
	name, example, manifest string
}

// policyManifest renders a release-policy manifest. The call timeout is
// generous (the machine is shared and -race slows guests) except for modules
// expected to time out.
func policyManifest(selectors, extra string) string {
	return policyManifestTimeout(selectors, extra, "5s")
}

func policyManifestTimeout(selectors, extra, timeout string) string {
	return fmt.Sprintf(`kind = "release-policy"
version = "1.0.0"
%s
limits {
  memory_pages = 256
  call_timeout = %q
  pool_size    = 2
  max_calls    = 10000
}
%s
`, selectors, timeout, extra)
}

// newWasmManager installs files in a fresh directory and loads them; every
// file must load (a refusal here is a broken example, not a test subject).
func newWasmManager(tb testing.TB, clock clockwork.Clock, files ...moduleFile) *plugins.Manager {
	tb.Helper()
	dir := tb.TempDir()
	for _, f := range files {
		pluginstest.Install(tb, dir, f.name, pluginstest.Wasm(tb, f.example), f.manifest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := plugins.NewManager(ctx, plugins.Options{
		Dir: dir, CacheDir: pluginstest.CacheDir(), Clock: clock,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error}),
	})
	if err != nil {
		tb.Fatalf("NewManager: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			tb.Errorf("closing the module manager: %v", err)
		}
	})
	for _, st := range m.Status() {
		if st.State != plugins.StateServing {
			tb.Fatalf("module %s is %s: %s", st.Name, st.State, st.Refusal)
		}
	}
	return m
}

// recordingObserver records module calls (the agent's metrics hook).
type recordingObserver struct {
	mu     sync.Mutex
	calls  map[string]int // module/kind
	faults map[string]int // module/fault
}

func newRecordingObserver() *recordingObserver {
	return &recordingObserver{calls: map[string]int{}, faults: map[string]int{}}
}

func (o *recordingObserver) ModuleCall(module, kind string, _ time.Duration, fault string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[module+"/"+kind]++
	if fault != "" {
		o.faults[module+"/"+fault]++
	}
}

func (o *recordingObserver) count(m map[string]int, key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return m[key]
}

// TestWasmModulesFaultIsolation runs the watcher over real Wasm modules: the
// default-policy module serves every volume no other module selects, and
// fault-policy, one manifest per runtime fault, serves one volume each. The
// healthy volume is released through Wasm; each faulty volume's claim is not
// released (fail closed: no CSI call for it), its last error names the
// module, its version and the fault kind, it backs off, and after
// max_attempts the volume is stuck with that fault. Passes are driven by
// hand (assess) on the fake clock, so attempts are counted exactly.
func TestWasmModulesFaultIsolation(t *testing.T) {
	faults := []struct {
		mode, fault string
	}{
		{"panic", string(plugins.FaultGuestError)},
		{"trap", string(plugins.FaultTrap)},
		{"spin", string(plugins.FaultTimeout)},
		{"oom", string(plugins.FaultOOM)},
		{"malformed", string(plugins.FaultBadOutput)},
		{"stranger", string(plugins.FaultBadOutput)},
	}
	files := []moduleFile{{name: "default-policy", example: "default-policy",
		manifest: policyManifest(`default = true`, "")}}
	for _, f := range faults {
		timeout := "5s"
		if f.mode == "spin" {
			timeout = "200ms"
		}
		files = append(files, moduleFile{name: "fault-" + f.mode, example: "fault-policy",
			manifest: policyManifestTimeout(fmt.Sprintf(`volumes = ["default/bad-%s"]`, f.mode), fmt.Sprintf(`config = { mode = %q }`, f.mode), timeout)})
	}
	const maxAttempts = 3
	fx := newFixture(t, Config{MaxAttempts: maxAttempts, StuckAfter: time.Hour}, nil)
	m := newWasmManager(t, fx.clock, files...)
	obs := newRecordingObserver()
	fx.w.mods = WasmModules(m, obs) // the manager needs the fixture's clock; nothing runs yet

	vols := []string{"good"}
	for _, f := range faults {
		vols = append(vols, "bad-"+f.mode)
	}
	for _, id := range vols {
		fx.store.putAlloc("a-"+id, testNode, structs.AllocComplete)
		fx.store.putVolume(newVolume(id, newClaim("a-"+id, testNode, structs.ClaimTaken)))
	}
	ctx := context.Background()
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		for _, id := range vols {
			if _, err := fx.w.assess(ctx, ref(id)); err != nil {
				t.Fatalf("pass %d over %s: %v", attempt, id, err)
			}
		}
		fx.clock.Advance(DefaultBackoffMax) // every backoff is due again
	}

	if c := fx.store.claim(ref("good"), "a-good"); c != nil {
		t.Fatalf("healthy volume's claim not released: %+v", c)
	}
	if n := obs.count(obs.calls, "default-policy/release-policy"); n != 1 {
		t.Fatalf("default-policy module called %d times for the healthy volume, want 1 (calls %v)", n, obs.calls)
	}
	for _, c := range fx.csi.callList() {
		if c.VolumeID != "vol-good" {
			t.Fatalf("CSI call for a volume whose policy faulted: %+v", c)
		}
	}
	for _, f := range faults {
		t.Run(f.mode, func(t *testing.T) {
			id, mod := "bad-"+f.mode, "fault-"+f.mode
			c := fx.store.claim(ref(id), "a-"+id)
			if c == nil {
				t.Fatal("claim released although its policy faulted")
			}
			e := c.LastError
			if c.State != structs.ClaimTaken || c.Attempts != maxAttempts || e == nil {
				t.Fatalf("claim = %+v, want taken after %d failed attempts", c, maxAttempts)
			}
			if e.Kind != structs.ErrorModule || e.Step != StepPolicy || e.Module != mod || e.ModuleVersion != "1.0.0" || e.Fault != f.fault {
				t.Fatalf("last error = %+v, want module %s 1.0.0 fault %s", e, mod, f.fault)
			}
			if !c.NextAttempt.After(e.Time) {
				t.Fatalf("next attempt %v: no backoff after a fault", c.NextAttempt)
			}
			s := fx.store.stuck(ref(id))
			if s == nil || s.Reason != ReasonMaxAttempts || s.Module != mod || s.Fault != f.fault || s.Attempts != maxAttempts {
				t.Fatalf("stuck = %+v, want max attempts with module %s fault %s", s, mod, f.fault)
			}
			if n := obs.count(obs.faults, mod+"/"+f.fault); n != maxAttempts {
				t.Fatalf("observer saw %d %s faults for %s, want %d", n, f.fault, mod, maxAttempts)
			}
		})
	}
}

// TestTerminalAgeNeverZero: an allocation that ended this very millisecond
// is sent with TerminalAgeMs 1, not 0 (the wire's "not terminal or
// unknown"), or an age-based policy such as grace-policy skips its grace
// whenever the watcher is faster than a millisecond (it is, on a fake clock).
func TestTerminalAgeNeverZero(t *testing.T) {
	fx := newFixture(t, Config{}, nil)
	fx.store.putAlloc("a1", testNode, structs.AllocComplete) // ModifyTime t0 == now
	fx.store.putAlloc("a2", testNode, structs.AllocComplete)
	fx.store.putAlloc("a3", testNode, structs.AllocRunning)
	fx.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken),
		newClaim("a2", testNode, structs.ClaimTaken), newClaim("a3", testNode, structs.ClaimTaken)))
	p, err := fx.w.load(ref("v1"))
	if err != nil || p == nil {
		t.Fatalf("load: %v", err)
	}
	for _, tc := range []struct {
		advance time.Duration
		alloc   string
		want    int64
	}{
		{0, "a1", 1},
		{0, "a3", 0}, // running: no age
		{1500 * time.Millisecond, "a2", 1500},
	} {
		p.now = p.now.Add(tc.advance)
		if got := p.allocView(tc.alloc).TerminalAgeMs; got != tc.want {
			t.Fatalf("%s after %v: TerminalAgeMs = %d, want %d", tc.alloc, tc.advance, got, tc.want)
		}
	}
}

// sharedVolumeReader hands out the same volume object on every read, as the
// real state store does (its objects are shared with API readers).
type sharedVolumeReader struct {
	*fakeStore
	v *structs.Volume
}

func (r sharedVolumeReader) Volume(string, string) (*structs.Volume, error) { return r.v, nil }

// TestPassNeverWritesStoreObjects: a pass that marks a volume stuck (here
// for a module fault) and one that clears the mark write only through the
// log, never into the volume object the store handed out (found as a data
// race between the watcher and the API encoding that object).
func TestPassNeverWritesStoreObjects(t *testing.T) {
	fx := newFixture(t, Config{MaxAttempts: 1}, testModules{policy: &scriptPolicy{err: fakeFault{}}})
	fx.store.putAlloc("a1", testNode, structs.AllocComplete)
	v := newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken))
	fx.store.putVolume(v)
	shared := v.Copy()
	before := shared.Copy()
	fx.w.deps.State = sharedVolumeReader{fx.store, shared}
	if _, err := fx.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if len(fx.store.stuckCalls()) != 1 {
		t.Fatalf("MarkStuck calls = %d, want 1", len(fx.store.stuckCalls()))
	}
	if !reflect.DeepEqual(shared, before) {
		t.Fatalf("the pass wrote into the store's volume object:\nbefore %+v\nafter  %+v", before, shared)
	}
	// Clearing: the shared object carries the mark, the claim is gone.
	shared.Stuck = &structs.Stuck{Reason: ReasonMaxAttempts, Since: t0}
	shared.Claims = map[string]*structs.Claim{}
	before = shared.Copy()
	if _, err := fx.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if calls := fx.store.stuckCalls(); len(calls) != 2 || calls[1].Stuck != nil {
		t.Fatalf("MarkStuck calls = %+v, want a clearing one", calls)
	}
	if !reflect.DeepEqual(shared, before) {
		t.Fatalf("clearing the mark wrote into the store's volume object: %+v", shared)
	}
}

// TestWasmAdapterDeclaredSteps: gcepd-adapter declares that it adapts only
// the controller steps (adapt_steps), so a release asks it once, for
// ControllerUnpublish (whose node ID it rewrites), and builds NodeUnpublish
// and NodeUnstage as the spec's default without a Wasm call.
func TestWasmAdapterDeclaredSteps(t *testing.T) {
	fx := newFixture(t, Config{}, nil)
	m := newWasmManager(t, fx.clock, moduleFile{name: "gcepd-adapter", example: "gcepd-adapter",
		manifest: fmt.Sprintf(`kind = "csi-adapter"
version = "1.0.0"
plugin_ids = [%q]
limits {
  call_timeout = "5s"
}`, testPlugin)})
	obs := newRecordingObserver()
	fx.w.mods = WasmModules(m, obs)
	// The driver's NodeGetInfo names the node the way the module maps it
	// from the node's GCE metadata; the host holds the module to that ID.
	gceID := "projects/p/zones/z/instances/" + testNode
	node := readyNode(testNode)
	node.Meta = map[string]string{"gce.project": "p", "gce.zone": "z"}
	node.Plugins[testPlugin].ExternalNodeID = gceID
	fx.store.putNode(node)
	fx.store.putAlloc("a1", testNode, structs.AllocComplete)
	c := newClaim("a1", testNode, structs.ClaimTaken)
	c.ExternalNodeID = gceID
	fx.store.putVolume(newVolume("db", c))

	if _, err := fx.w.assess(context.Background(), ref("db")); err != nil {
		t.Fatal(err)
	}
	if c := fx.store.claim(ref("db"), "a1"); c != nil {
		t.Fatalf("claim not released: %+v (calls %s)", c, fmtCalls(fx.csi.callList()))
	}
	if n := obs.count(obs.calls, "gcepd-adapter/csi-adapter"); n != 1 {
		t.Fatalf("adapter called %d times for one release, want 1 (the controller step)", n)
	}
	var methods []string
	for _, c := range fx.csi.callList() {
		methods = append(methods, c.Method)
		if c.VolumeID != "vol-db" {
			t.Errorf("%s got volume ID %q, want the external ID", c.Method, c.VolumeID)
		}
		if c.Method == "ControllerUnpublishVolume" && c.NodeID != "projects/p/zones/z/instances/"+testNode {
			t.Errorf("ControllerUnpublish node ID %q: not the adapter's", c.NodeID)
		}
	}
	if want := []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"}; !reflect.DeepEqual(methods, want) {
		t.Fatalf("CSI calls %v, want %v", methods, want)
	}
}
