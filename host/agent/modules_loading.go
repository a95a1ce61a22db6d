package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
)

// The module directory's first load runs after the API listens: compiling
// a Go guest without a warm compilation cache takes seconds (each), and an
// agent that compiled every module before it listened was silent that long
// and looked hung. Meanwhile `module list` and the UI show the modules as
// loading, and nothing judges or publishes a volume with what would serve
// it before its module is there: the leader's watcher starts once the load
// is done, and a claim waits for it (waitModules).

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

// claimModuleWait bounds how long a claim waits for the first module
// load: well inside the API's write_timeout, so the caller gets this
// answer (a 503 saying to try again) rather than a dropped connection.
var claimModuleWait = 10 * time.Second

// waitModules is the claim path's Ready (server.Config): until the first
// module load is done a claim waits for it, claimModuleWait at most, before
// it takes its volume or writes anything. Without the wait, a claim in the
// first seconds would publish with the CSI spec's default request where the
// volume's adapter module maps it otherwise.
func (a *Agent) waitModules(ctx context.Context) error {
	select {
	case <-a.modulesReady:
		return nil
	default:
	}
	t := a.clock.NewTimer(claimModuleWait)
	defer t.Stop()
	select {
	case <-a.modulesReady:
		return nil
	case <-t.Chan():
		return structs.Unavailable("the agent's modules are still loading (volhost module list shows them): nothing was done, try again")
	case <-ctx.Done():
		return fmt.Errorf("waiting for the agent's modules to load: %w", ctx.Err())
	}
}
