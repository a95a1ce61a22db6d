package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/kit"
	"github.com/volhost/volhost/watcher"
)

var _ api.ModuleBackend = (*Agent)(nil)

// loadModules starts the Wasm module runtime over the module directory and
// returns what serves each volume: the matching module, else the native
// default policy and spec adapter. A broken module is refused and visible
// in `module status`; it never stops the agent.
func (a *Agent) loadModules(maxima plugins.Maxima) (watcher.Modules, error) {
	a.moduleEvents = &moduleEvents{a: a, kick: make(chan struct{}, 1)}
	a.moduleSwaps = &moduleSwaps{kick: make(chan struct{}, 1)}
	a.modulesReady = make(chan struct{})
	if a.cfg.ModuleDir == "" {
		close(a.modulesReady)
		return watcher.NativeModules(), nil
	}
	m, err := plugins.NewManager(context.Background(), plugins.Options{
		// Loaded by Start once the API listens (modules_loading.go); a
		// directory that cannot be read (a typo in -module-dir) still
		// stops the agent here, naming it.
		LoadLater: true,
		Dir:       a.cfg.ModuleDir,
		CacheDir:  a.moduleCacheDir(),
		Logger:    a.logger,
		Clock:     a.clock,
		OnEvent: func(ev plugins.Event) {
			a.Metrics.ModuleEvent(ev)
			a.moduleEvents.add(ev)
		},
		OnSwap: a.moduleSwaps.add,
		OnCall: a.Metrics.ModuleGenerationCall,
		Maxima: maxima,
		Signed: a.signedModules(),
	})
	if err != nil {
		return nil, fmt.Errorf("module directory %s: %w", a.cfg.ModuleDir, err)
	}
	a.Modules = m
	a.Metrics.RegisterModuleStatus(m.Status)
	return watcher.WasmModules(m, a.Metrics), nil
}

// moduleCacheDir picks wazero's compilation cache: the configured one, the
// shared one tests and `make` use, or one under the data directory or the
// user's cache directory.
func (a *Agent) moduleCacheDir() string {
	if a.cfg.ModuleCacheDir != "" {
		return a.cfg.ModuleCacheDir
	}
	if env := os.Getenv("VOLHOST_WAZERO_CACHE"); env != "" {
		return env
	}
	if a.cfg.DataDir != "" {
		return filepath.Join(a.cfg.DataDir, "module-cache")
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "volhost", "module-cache")
	}
	return ""
}

// startModules loads the module directory, then watches it until ctx ends.
func (a *Agent) startModules(ctx context.Context) {
	if a.Modules == nil {
		return
	}
	a.wg.Add(4)
	go func() {
		defer a.wg.Done()
		a.loadFirstModules(ctx)
	}()
	go func() {
		defer a.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.moduleSwaps.kick:
				a.reassessSwapped()
			}
		}
	}()
	go func() {
		defer a.wg.Done()
		if err := a.Modules.Watch(ctx); err != nil && ctx.Err() == nil {
			a.logger.Error("watching the module directory stopped; use `volhost module reload`", "dir", a.cfg.ModuleDir, "error", err)
		}
	}()
	go func() {
		defer a.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.moduleEvents.kick:
				a.moduleEvents.flush()
			}
		}
	}()
}

func (a *Agent) closeModules(ctx context.Context) error {
	if a.Modules == nil {
		return nil
	}
	return a.Modules.Close(ctx)
}

// ReloadModules rescans the module directory now (`volhost module reload`, SIGHUP).
func (a *Agent) ReloadModules(ctx context.Context) ([]plugins.Status, error) {
	if a.Modules == nil {
		return nil, structs.Conflict("no module directory is configured (start the agent with -module-dir)")
	}
	return a.Modules.Reload(ctx)
}

// ModuleStatuses lists every module this server knows.
func (a *Agent) ModuleStatuses() ([]plugins.Status, error) {
	if a.Modules == nil {
		return nil, nil
	}
	return a.Modules.Status(), nil
}

// ModuleInfo is one module's status and what it serves now: how many
// volumes, the first limit of them in ID order, and their plugins, read
// through the store's indexes (servedQuery) rather than a scan.
func (a *Agent) ModuleInfo(name string, limit int) (*api.ModuleInfo, error) {
	if a.Modules == nil {
		return nil, structs.NotFound("module", name)
	}
	st, ok := a.Modules.StatusOf(name)
	if !ok {
		return nil, structs.NotFound("module", name)
	}
	q := &servedQuery{snap: a.Store.Snapshot(), kind: abi.Kind(st.Kind), name: name, match: a.Modules.Match, limit: limit}
	res, err := q.run(st, a.Modules.Status())
	if err != nil {
		return nil, err
	}
	return &api.ModuleInfo{Status: st, ServedVolumeCount: res.count, ServedVolumes: nonNilRefs(res.volumes),
		ServedVolumesTruncated: res.truncated, ServedPlugins: nonNilStrings(res.plugins)}, nil
}

func nonNilRefs(r []structs.VolumeRef) []structs.VolumeRef {
	if r == nil {
		return []structs.VolumeRef{}
	}
	return r
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func targetOf(v *structs.Volume) plugins.Target {
	return plugins.Target{Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID}
}

// moduleSwaps queues the modules whose serving generation changed, for
// the agent's goroutine to have the watcher re-judge the volumes they
// serve (reassessSwapped): the manager reports a swap from inside its
// reload, which must not wait for the state store.
type moduleSwaps struct {
	kick    chan struct{}
	mu      sync.Mutex
	pending []plugins.Swap
}

func (s *moduleSwaps) add(sw plugins.Swap) {
	s.mu.Lock()
	s.pending = append(s.pending, sw)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *moduleSwaps) take() []plugins.Swap {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.pending
	s.pending = nil
	return out
}

// reassessSwapped has the watcher judge again, at once, every volume with
// a releasable claim that a swapped module's old or new generation
// selects: a wait the old generation asked for must not outlive it (a
// claim deferred 30 s by generation N was released at 30.4 s although N+1
// said 2 s: TestModuleSwapRejudgesAtOnce). The initial load happens before the watcher
// exists, and a disabled watcher ignores it: its step-up judges every
// volume anyway.
func (a *Agent) reassessSwapped() {
	swaps := a.moduleSwaps.take()
	if len(swaps) == 0 || a.Watcher == nil {
		return
	}
	n, err := a.Watcher.Reassess(func(v *structs.Volume) bool {
		t := targetOf(v)
		for _, sw := range swaps {
			if sw.Selects(t) {
				return true
			}
		}
		return false
	})
	if err != nil {
		a.logger.Warn("could not re-judge the volumes of swapped modules; they are judged at their next pass", "error", err)
		return
	}
	if n > 0 {
		a.logger.Info("module swap: volumes re-judged", "volumes", n, "modules", len(swaps))
	}
}

// moduleEvents carries module lifecycle events (loaded, swapped, refused,
// circuit opened or closed) into the replicated events table. The runtime
// reports them synchronously and must not block, and only the leader can
// write, so they queue here (bounded) until this server leads: the events
// of the first load happen before the first election.
type moduleEvents struct {
	a       *Agent
	kick    chan struct{} // wakes the agent's flushing goroutine
	mu      sync.Mutex
	pending []*structs.Event
}

const maxPendingModuleEvents = 256

func (e *moduleEvents) add(ev plugins.Event) {
	e.a.logger.Info("module event", "module", ev.Module, "event", ev.Kind, "generation", ev.Generation,
		"version", ev.Version, "reason", ev.Reason)
	msg := moduleEventMessage(ev)
	e.mu.Lock()
	if len(e.pending) < maxPendingModuleEvents {
		e.pending = append(e.pending, &structs.Event{
			Time: ev.Time, Type: structs.EventModule, Module: ev.Module, Message: msg,
			Namespace: ev.Namespace, VolumeID: ev.VolumeID, // a shadow disagreement's volume
			Fields: map[string]string{"event": string(ev.Kind), "version": ev.Version, "generation": fmt.Sprint(ev.Generation)},
		})
	}
	e.mu.Unlock()
	// Flushed off the caller's goroutine: a reload or a breaker trip must
	// not wait for the log.
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// moduleEventMessage is the event's one line, e.g. "module grace refused
// (generation 2, version 1.1.0): manifest pins ...". A module refused
// before it said its version has none, and the line says nothing of it
// rather than "version )".
func moduleEventMessage(ev plugins.Event) string {
	var details []string
	if ev.Generation > 0 {
		details = append(details, fmt.Sprintf("generation %d", ev.Generation))
	}
	if ev.Version != "" {
		details = append(details, "version "+ev.Version)
	}
	msg := fmt.Sprintf("module %s %s", ev.Module, ev.Kind)
	if len(details) > 0 {
		msg += " (" + strings.Join(details, ", ") + ")"
	}
	if ev.Reason != "" {
		msg += ": " + ev.Reason
	}
	return msg
}

// flush writes the queued events when this server leads.
func (e *moduleEvents) flush() {
	if e == nil || e.a.Cluster == nil || !e.a.Cluster.IsLeader() {
		return
	}
	e.mu.Lock()
	batch := e.pending
	e.pending = nil
	e.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	if _, _, err := e.a.Cluster.Apply(context.Background(), structs.EventAppendType, &structs.EventAppendRequest{Events: batch}); err != nil {
		e.a.logger.Warn("could not record module events", "count", len(batch), "error", err)
	}
}

// ModuleView records the views the watcher would hand volume ns/id's
// modules now (`volhost module record`): the policy's, or with step the
// adapter's for one claim; secrets redacted. It reads this server's state,
// which on a follower may trail the leader's by a few entries.
func (a *Agent) ModuleView(ns, id, step, allocID string) (*kit.Recording, error) {
	ref := structs.VolumeRef{Namespace: ns, ID: id}
	views, err := watcher.ViewOf(a.Store.Reader(), ref, step, allocID, a.clock.Now())
	if err != nil {
		return nil, err
	}
	v, err := a.Store.Reader().Volume(ns, id)
	if err != nil {
		return nil, err
	}
	var secrets map[string]string
	if v != nil {
		secrets = v.Secrets
	}
	name := fmt.Sprintf("%s/%s policy", ns, id)
	if views.Adapter != nil {
		name = fmt.Sprintf("%s/%s %s %s", ns, id, views.Adapter.Step, views.Adapter.Claim.AllocID)
	}
	return kit.Record(name, views.Policy, views.Adapter, secrets), nil
}

// PromoteModule makes a module's shadow candidate serve (`volhost module
// promote`).
func (a *Agent) PromoteModule(ctx context.Context, name string, opts plugins.PromoteOptions) (plugins.Status, error) {
	if a.Modules == nil {
		return plugins.Status{}, structs.NotFound("module", name)
	}
	st, err := a.Modules.PromoteWith(ctx, name, opts)
	return st, rolloutError(name, err)
}

// RollbackModule returns a module to its last known good generation.
func (a *Agent) RollbackModule(ctx context.Context, name string) (plugins.Status, error) {
	if a.Modules == nil {
		return plugins.Status{}, structs.NotFound("module", name)
	}
	st, err := a.Modules.Rollback(ctx, name)
	return st, rolloutError(name, err)
}

// DiscardShadow drops a module's shadow candidate (`volhost module
// discard`).
func (a *Agent) DiscardShadow(ctx context.Context, name string) (plugins.Status, error) {
	if a.Modules == nil {
		return plugins.Status{}, structs.NotFound("module", name)
	}
	st, err := a.Modules.DiscardShadow(ctx, name)
	return st, rolloutError(name, err)
}

// ShadowModule loads an uploaded candidate beside a module's serving
// generation (`volhost module shadow`). A module with a module_source
// refuses it (the runtime's Options.Signed): its candidates are the
// source's signed bundles.
func (a *Agent) ShadowModule(ctx context.Context, name string, wasm, manifest []byte) (plugins.Status, error) {
	if a.Modules == nil {
		return plugins.Status{}, structs.NotFound("module", name)
	}
	st, err := a.Modules.Shadow(ctx, name, wasm, manifest)
	return st, rolloutError(name, err)
}

// rolloutError maps the runtime's rollout errors onto the API's types.
func rolloutError(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, plugins.ErrNoModule):
		return structs.NotFound("module", name)
	case errors.Is(err, plugins.ErrNoShadow), errors.Is(err, plugins.ErrNoLastKnownGood), errors.Is(err, plugins.ErrSelectionChange):
		return structs.Conflict("%v", err)
	case errors.Is(err, plugins.ErrSignatureRequired):
		// The token may upload; the module's configuration refuses
		// unsigned code: 403, with the runtime's message saying what to do.
		return fmt.Errorf("%w: %w", err, structs.ErrPermissionDenied)
	case errors.Is(err, plugins.ErrCandidate):
		return &structs.ValidationError{Field: "module", Msg: err.Error()}
	}
	return err
}
