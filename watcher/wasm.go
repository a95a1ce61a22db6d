package watcher

import (
	"context"
	"errors"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/watcher/attach"
)

// ModuleRuntime is the part of the Wasm module runtime (*plugins.Manager)
// the watcher calls. A module is looked up by name at every call, so a hot
// swap takes effect at the next pass without the watcher knowing.
type ModuleRuntime interface {
	Match(kind abi.Kind, t plugins.Target) (string, bool)
	StatusOf(name string) (plugins.Status, bool)
	DecideRelease(ctx context.Context, module string, req *abi.PolicyRequest) (*abi.PolicyResponse, error)
	AdaptRequest(ctx context.Context, module string, req *abi.AdapterRequest) (*abi.AdapterResponse, error)
	AdaptsStep(module, step string) bool
	ClassifyError(ctx context.Context, module string, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error)

	// The failure strategy (a manifest's on_failure): what answers when a module faults.
	OnFailure(module string) string
	// The *LastKnownGood calls ask a generation other than faulted (the
	// generation the fault came from), preferring the previous one.
	DecideReleaseLastKnownGood(ctx context.Context, module string, faulted uint64, req *abi.PolicyRequest) (*abi.PolicyResponse, error)
	AdaptRequestLastKnownGood(ctx context.Context, module string, faulted uint64, req *abi.AdapterRequest) (*abi.AdapterResponse, error)
	ClassifyErrorLastKnownGood(ctx context.Context, module string, faulted uint64, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error)
}

// ModuleObserver records each module call (Prometheus in the agent).
type ModuleObserver interface {
	ModuleCall(module, kind string, d time.Duration, fault string)
}

// WasmModules serves each volume with the module whose manifest selects it
// (volume selector, then plugin ID, then a default module) and falls back
// to the native implementations when none does.
func WasmModules(rt ModuleRuntime, obs ModuleObserver) Modules {
	return &wasmModules{rt: rt, obs: obs, native: NativeModules()}
}

type wasmModules struct {
	rt     ModuleRuntime
	obs    ModuleObserver
	native Modules
}

func target(v *structs.Volume) plugins.Target {
	return plugins.Target{Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID}
}

// PolicyFor implements Modules.
func (m *wasmModules) PolicyFor(v *structs.Volume) Policy {
	if name, ok := m.rt.Match(abi.KindReleasePolicy, target(v)); ok {
		return &wasmModule{m: m, name: name, kind: abi.KindReleasePolicy}
	}
	return m.native.PolicyFor(v)
}

// AdapterFor implements Modules.
func (m *wasmModules) AdapterFor(v *structs.Volume) attach.Adapter {
	if name, ok := m.rt.Match(abi.KindCSIAdapter, target(v)); ok {
		return &wasmModule{m: m, name: name, kind: abi.KindCSIAdapter}
	}
	return m.native.AdapterFor(v)
}

// wasmModule is one module, called by name. It implements Policy or
// attach.Adapter (by kind) and attach.Named, so faults the host finds in its answers
// (an unsafe release, a stranger's claim) name the module and version.
type wasmModule struct {
	m    *wasmModules
	name string
	kind abi.Kind
}

var (
	_ Policy         = (*wasmModule)(nil)
	_ attach.Adapter = (*wasmModule)(nil)
	_ attach.Named   = (*wasmModule)(nil)
)

// ModuleName implements attach.Named.
func (w *wasmModule) ModuleName() string { return w.name }

// ModuleVersion implements attach.Named: the serving generation's version.
func (w *wasmModule) ModuleVersion() string {
	if st, ok := w.m.rt.StatusOf(w.name); ok {
		return st.Version
	}
	return ""
}

// observe records a call's latency and, for a failed call, its fault kind.
// err points at the call's named result, read when the deferred call runs.
func (w *wasmModule) observe(start time.Time, errp *error) {
	if w.m.obs == nil {
		return
	}
	fault := ""
	if err := *errp; err != nil {
		fault = "error"
		var mf attach.ModuleFault
		if errors.As(err, &mf) {
			fault = mf.FaultKind()
		}
	}
	w.m.obs.ModuleCall(w.name, string(w.kind), time.Since(start), fault)
}

// strategy is the module's on_failure, read before a call: the call may
// roll its generation back, and the strategy is the one of the generation
// asked.
func (w *wasmModule) strategy() string { return w.m.rt.OnFailure(w.name) }

// fallback reports whether a failed call gets another answer under the
// module's on_failure strategy, and which: "native" asks the built-in
// default policy or spec adapter, "last_known_good" the module's previous
// generation; "wait" (and a caller that gave up) keeps the fault, so the
// claim waits, visibly. Whichever answers, the watcher checks the answer as
// it checks any module's (decide, abi.CheckAdapterIDs, classify): a strategy
// changes who is asked, never what the host allows. It also returns the
// generation that faulted.
func fallback(ctx context.Context, strategy string, err error) (string, uint64) {
	var mf attach.ModuleFault
	if err == nil || ctx.Err() != nil || !errors.As(err, &mf) {
		return plugins.OnFailureWait, 0
	}
	var gen uint64
	var g interface{ ModuleGeneration() uint64 }
	if errors.As(err, &g) {
		gen = g.ModuleGeneration()
	}
	return strategy, gen
}

// DecideRelease implements Policy.
func (w *wasmModule) DecideRelease(ctx context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	strategy := w.strategy()
	resp, err := w.decide(ctx, req)
	switch s, gen := fallback(ctx, strategy, err); s {
	case plugins.OnFailureNative:
		return DefaultPolicy{}.DecideRelease(ctx, req)
	case plugins.OnFailureLastKnownGood:
		if r, lerr := w.m.rt.DecideReleaseLastKnownGood(ctx, w.name, gen, req); lerr == nil {
			return r, nil
		}
	}
	return resp, err
}

func (w *wasmModule) decide(ctx context.Context, req *abi.PolicyRequest) (resp *abi.PolicyResponse, err error) {
	defer w.observe(time.Now(), &err)
	return w.m.rt.DecideRelease(ctx, w.name, req)
}

// AdaptRequest implements Adapter.
func (w *wasmModule) AdaptRequest(ctx context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	// An adapter that declared the steps it changes (ABI.md section 4,
	// adapt_steps) is not asked about the others: their requests are the
	// spec's default, and a Wasm call per release step is the larger part
	// of a release's CPU when releases are quick.
	if !w.m.rt.AdaptsStep(w.name, req.Step) {
		return SpecAdapter{}.AdaptRequest(ctx, req)
	}
	strategy := w.strategy()
	resp, err := w.adapt(ctx, req)
	switch s, gen := fallback(ctx, strategy, err); s {
	case plugins.OnFailureNative:
		return SpecAdapter{}.AdaptRequest(ctx, req)
	case plugins.OnFailureLastKnownGood:
		if r, lerr := w.m.rt.AdaptRequestLastKnownGood(ctx, w.name, gen, req); lerr == nil {
			return r, nil
		}
	}
	return resp, err
}

func (w *wasmModule) adapt(ctx context.Context, req *abi.AdapterRequest) (resp *abi.AdapterResponse, err error) {
	defer w.observe(time.Now(), &err)
	return w.m.rt.AdaptRequest(ctx, w.name, req)
}

// ClassifyError implements Adapter.
func (w *wasmModule) ClassifyError(ctx context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	strategy := w.strategy()
	resp, err := w.classify(ctx, req)
	switch s, gen := fallback(ctx, strategy, err); s {
	case plugins.OnFailureNative:
		return SpecAdapter{}.ClassifyError(ctx, req)
	case plugins.OnFailureLastKnownGood:
		if r, lerr := w.m.rt.ClassifyErrorLastKnownGood(ctx, w.name, gen, req); lerr == nil {
			return r, nil
		}
	}
	return resp, err
}

func (w *wasmModule) classify(ctx context.Context, req *abi.ClassifyRequest) (resp *abi.ClassifyResponse, err error) {
	defer w.observe(time.Now(), &err)
	return w.m.rt.ClassifyError(ctx, w.name, req)
}
