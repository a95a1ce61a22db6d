package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/watcher/attach"
)

// The module directory's first load runs after the API listens: compiling
// a Go guest without a warm compilation cache takes seconds (each), and an
// agent that compiled every module before it listened was silent that long
// and looked hung. Meanwhile `module list` and the UI show the modules as
// loading, and nothing judges or publishes a volume with what would serve
// it before its module is there: the leader's watcher starts once the load
// is done, and a claim's CSI adapter call waits for it (loadingModules).

// ModulesLoaded is closed once the module directory's first load is done
// (at once without a module directory).
func (a *Agent) ModulesLoaded() <-chan struct{} { return a.modulesReady }

// loadFirstModules runs the module directory's first load, then the module
// sources (a source's shadow candidate needs the generation it shadows).
func (a *Agent) loadFirstModules(ctx context.Context) {
	if a.beforeFirstLoad != nil {
		a.beforeFirstLoad()
	}
	start := time.Now()
	sts, err := a.Modules.Reload(ctx)
	if err != nil {
		// The directory could not be read: nothing serves, the native
		// default does, as with an empty directory; watching and `module
		// reload` try again.
		a.logger.Error("loading the module directory failed; volumes are served by the native default until a reload succeeds", "dir", a.cfg.ModuleDir, "error", err)
	}
	serving, refused := 0, 0
	for _, st := range sts {
		switch st.State {
		case plugins.StateServing:
			serving++
		case plugins.StateRefused:
			refused++
		}
	}
	if ctx.Err() != nil {
		return // shutting down mid-load: nothing is ready
	}
	a.logger.Info("modules loaded", "dir", a.cfg.ModuleDir, "serving", serving, "refused", refused,
		"load_time", time.Since(start).Round(time.Millisecond))
	close(a.modulesReady)
	a.startSources(ctx)
}

// loadingModules is what the claim path sees: until the first module load
// is done, a CSI adapter call waits for it (bounded by the claim's
// context) and then asks whatever serves the volume. Without the wait, a
// claim in the first seconds would publish with the CSI spec's default
// request where the volume's adapter module maps it otherwise.
type loadingModules struct {
	attach.Adapters
	ready <-chan struct{}
}

// AdapterFor implements attach.Adapters.
func (m loadingModules) AdapterFor(v *structs.Volume) attach.Adapter {
	select {
	case <-m.ready:
		return m.Adapters.AdapterFor(v)
	default:
		return awaitAdapter{m: m, v: v}
	}
}

// awaitAdapter is the adapter of a volume asked for during the first load.
type awaitAdapter struct {
	m loadingModules
	v *structs.Volume
}

// claimModuleWait bounds how long a claim waits for the first module
// load: well inside the API's write_timeout, so the caller gets this
// answer (a 504 saying to try again) rather than a dropped connection.
const claimModuleWait = 10 * time.Second

func (a awaitAdapter) wait(ctx context.Context) (attach.Adapter, error) {
	ctx, cancel := context.WithTimeout(ctx, claimModuleWait)
	defer cancel()
	select {
	case <-a.m.ready:
		return a.m.Adapters.AdapterFor(a.v), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("the agent's modules are still loading (volhost module list shows them); try again: %w", ctx.Err())
	}
}

func (a awaitAdapter) AdaptRequest(ctx context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	ad, err := a.wait(ctx)
	if err != nil {
		return nil, err
	}
	return ad.AdaptRequest(ctx, req)
}

func (a awaitAdapter) ClassifyError(ctx context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	ad, err := a.wait(ctx)
	if err != nil {
		return nil, err
	}
	return ad.ClassifyError(ctx, req)
}
