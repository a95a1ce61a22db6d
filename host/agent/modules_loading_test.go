package agent

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// lockedBuffer is a log output tests read while the agent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAgentListensWhileModulesLoad: the agent answers at once while its
// modules compile (a cold `make run` was silent for 13 s before the API
// listened); `module list` shows them loading; the leader releases
// nothing and a claim waits until they are loaded, so no volume is judged
// or published by the native default while its module compiles; then the
// grace policy serves (its hold, not a native release).
func TestAgentListensWhileModulesLoad(t *testing.T) {
	dir := t.TempDir()
	installModule(t, dir, "policy", "grace-policy", "modules-swap/policy-grace.hcl")
	cfg := localConfig()
	cfg.ModuleDir = dir
	cfg.ModuleCacheDir = pluginstest.CacheDir()
	logs := &lockedBuffer{}
	a, err := New(cfg, Options{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})})
	if err != nil {
		t.Fatal(err)
	}
	load := make(chan struct{})
	a.beforeFirstLoad = func() { <-load }
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unblock := func() { once.Do(func() { close(load) }) }
	t.Cleanup(func() {
		unblock()
		if err := a.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	c, err := client.New("http://"+a.HTTPAddr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mods, err := c.Modules(ctx)
	if err != nil {
		t.Fatalf("module list while loading: %v", err)
	}
	if len(mods) != 1 || mods[0].Name != "policy" || mods[0].State != plugins.StateLoading {
		t.Fatalf("module list while loading = %+v, want policy loading", mods)
	}
	testutil.WaitFor(t, "this agent leads, the log saying releases wait for the modules", func() bool {
		return strings.Contains(logs.String(), "claims are released once the modules are loaded")
	})
	if a.Watcher.Enabled() {
		t.Fatal("the leader's watcher runs while its modules load")
	}

	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	setupPlugins(t, c, map[string]*csitest.Server{"csi": drv})
	if _, err := c.RegisterVolumes(ctx, []*structs.Volume{{ID: "v1", ExternalID: "disk-v1", PluginID: "csi",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: "a-v1", NodeID: "node1", ClientStatus: structs.AllocRunning}}); err != nil {
		t.Fatal(err)
	}
	// A claim during the load waits for it, claimModuleWait at most, then
	// is refused saying so, with nothing published.
	claimModuleWait = 50 * time.Millisecond
	t.Cleanup(func() { claimModuleWait = 10 * time.Second })
	claim := &structs.ClaimRequest{VolumeID: "v1", AllocID: "a-v1", NodeID: "node1", Mode: structs.ClaimWrite}
	_, err = c.ClaimVolume(ctx, claim)
	var he *client.APIError
	if !errors.As(err, &he) || he.StatusCode != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "modules are still loading") {
		t.Fatalf("claim during the load = %v, want a 503 naming the load", err)
	}
	if n := len(drv.Calls(csitest.ControllerPublish)); n != 0 {
		t.Fatalf("%d ControllerPublish calls while the modules load", n)
	}
	unblock()
	waitModulesLoaded(t, a)
	if _, err := c.ClaimVolume(ctx, claim); err != nil {
		t.Fatalf("claim once the modules loaded: %v", err)
	}
	testutil.WaitFor(t, "the watcher running once the modules are loaded", a.Watcher.Enabled)
	if st, _ := a.Modules.StatusOf("policy"); st.State != plugins.StateServing {
		t.Fatalf("policy after the load: %+v, want serving", st)
	}
	endAllocs(t, c, "v1")
	testutil.WaitFor(t, "the grace policy's hold on v1", func() bool {
		r, _, err := c.Volume(ctx, "default", "v1", nil)
		if err != nil {
			t.Fatal(err)
		}
		cl := r.Volume.Claims["a-v1"]
		return cl != nil && cl.Hold != nil && cl.Hold.Module == "policy"
	})
	if n := len(drv.Calls(csitest.ControllerUnpublish)); n != 0 {
		t.Fatalf("%d ControllerUnpublish calls during the grace", n)
	}
	for _, want := range []string{"loading modules", "module loading", "modules loaded"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log says nothing of %q:\n%s", want, logs.String())
		}
	}
}

// TestClaimWaitsForModules: until the first load is done a claim waits
// for it, claimModuleWait at most (then a 503-class refusal saying to try
// again), or until the caller gives up; once loaded it waits for nothing.
func TestClaimWaitsForModules(t *testing.T) {
	clk := clockwork.NewFakeClock()
	a := &Agent{modulesReady: make(chan struct{}), clock: clk}
	errc := make(chan error, 1)
	go func() { errc <- a.waitModules(context.Background()) }()
	if err := clk.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(claimModuleWait)
	if err := <-errc; !errors.Is(err, structs.ErrUnavailable) || !strings.Contains(err.Error(), "modules are still loading") {
		t.Fatalf("a claim past claimModuleWait = %v, want unavailable, naming the load", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.waitModules(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a claim whose caller gave up = %v, want its context's error", err)
	}
	go func() { errc <- a.waitModules(context.Background()) }()
	if err := clk.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	close(a.modulesReady)
	if err := <-errc; err != nil {
		t.Fatalf("a claim waiting when the load ends = %v, want nil", err)
	}
	if err := a.waitModules(ctx); err != nil {
		t.Fatalf("a claim after the load = %v, want nil", err)
	}
}
