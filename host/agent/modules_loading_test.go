package agent

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/pluginstest"
	"github.com/volhost/volhost/watcher"
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
	claimed := make(chan error, 1)
	go func() {
		_, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "v1", AllocID: "a-v1", NodeID: "node1", Mode: structs.ClaimWrite})
		claimed <- err
	}()
	select {
	case err := <-claimed:
		t.Fatalf("a claim was answered while the modules load (%v): it must wait for its adapter", err)
	default:
	}
	unblock()
	// Answered once the modules are loaded, or, when the load outlasts
	// claimModuleWait (a cold compile under -race), refused saying so, and
	// then claimed again.
	if err := <-claimed; err != nil {
		if !strings.Contains(err.Error(), "modules are still loading") {
			t.Fatalf("claim during the load: %v, want it answered, or refused naming the load", err)
		}
		waitModulesLoaded(t, a)
		if _, err := c.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: "v1", AllocID: "a-v1", NodeID: "node1", Mode: structs.ClaimWrite}); err != nil {
			t.Fatalf("claim once the modules loaded: %v", err)
		}
	}
	waitModulesLoaded(t, a)
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

// TestClaimAdapterWaitsForModules: until the first load is done a claim's
// adapter call waits, bounded by the claim's context, then asks whatever
// serves the volume.
func TestClaimAdapterWaitsForModules(t *testing.T) {
	ready := make(chan struct{})
	m := loadingModules{Adapters: watcher.NativeModules(), ready: ready}
	v := &structs.Volume{ID: "v1", ExternalID: "disk-v1", PluginID: "csi"}
	req := &abi.AdapterRequest{Step: abi.StepControllerPublish, Volume: abi.VolumeView{ID: "v1", ExternalID: "disk-v1"}, Node: abi.NodeView{ID: "node1", ExternalID: "ext-node1"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err := m.AdapterFor(v).AdaptRequest(ctx, req)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "modules are still loading") {
		t.Fatalf("adapter call while loading = %v, want the caller's deadline, naming the load", err)
	}
	pending := m.AdapterFor(v) // asked for during the load, called after it
	close(ready)
	if _, err := pending.AdaptRequest(context.Background(), req); err != nil {
		t.Fatalf("adapter call after the load: %v", err)
	}
	if _, ok := m.AdapterFor(v).(awaitAdapter); ok {
		t.Fatal("after the load AdapterFor still hands out the waiting adapter")
	}
}
