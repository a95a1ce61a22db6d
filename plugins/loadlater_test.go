package plugins

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
)

// TestLoadLater: with LoadLater, NewManager compiles nothing; the
// directory's modules show as loading (what `module list` and the UI
// show while an agent that already listens compiles them), serve nothing
// and match no volume, until the first Reload loads them. A directory that
// cannot be read is still an error at once (a typo in -module-dir).
func TestLoadLater(t *testing.T) {
	wasm := exampleWasm(t, "default-policy")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "policy", wasm, manifest("release-policy", "default = true\n"+policyManifest))
	}, func(o *Options) { o.LoadLater = true })
	st, ok := e.m.StatusOf("policy")
	if !ok || st.State != StateLoading || st.Generation != 0 {
		t.Fatalf("status before the first load = %+v, %v; want loading", st, ok)
	}
	target := Target{Namespace: "default", VolumeID: "v1", PluginID: "csi"}
	if name, ok := e.m.Match(abi.KindReleasePolicy, target); ok {
		t.Fatalf("a loading module matched a volume: %s", name)
	}
	if _, err := e.m.DecideRelease(context.Background(), "policy", volumeRequest(1)); err == nil || !strings.Contains(err.Error(), "not serving") {
		t.Fatalf("a call on a loading module = %v, want not serving", err)
	}
	if len(e.eventsOf(EventLoaded)) != 0 {
		t.Fatal("a loaded event before the first load")
	}
	if _, err := e.m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.m.StatusOf("policy"); st.State != StateServing || st.Generation != 1 {
		t.Fatalf("status after the first load = %+v, want serving generation 1", st)
	}
	if name, ok := e.m.Match(abi.KindReleasePolicy, target); !ok || name != "policy" {
		t.Fatalf("match after the load = %q, %v; want policy", name, ok)
	}

	_, err := NewManager(context.Background(), Options{Dir: filepath.Join(t.TempDir(), "nope"), LoadLater: true})
	if err == nil || !strings.Contains(err.Error(), "module directory") {
		t.Fatalf("NewManager over a missing directory = %v, want an error naming it", err)
	}
}
