// Package plugins owns the WebAssembly side of volhost: it loads release-policy
// and csi-adapter modules (NAME.wasm + NAME.hcl) from a directory, validates
// them against the ABI in package abi, compiles them with a disk compilation
// cache, pools their instances under per-module limits (memory pages, call
// timeout, pool size, calls per instance), invokes them with fault isolation
// and a circuit breaker, hot-swaps new versions without dropping calls, and
// reports per-module status. Optional exports of a minor ABI version
// (ABI 1.1: volhost_confirm_fence, confirmfence.go) are found at load with
// their exact signature and called only on generations that have them.
//
// Nothing here knows about volumes beyond the abi messages: the watcher
// (which imports this package, never the reverse) decides what to ask and
// validates the answers against its own invariants.
//
// One wazero runtime is created per module generation, because wazero's
// memory cap is per runtime, and it is closed once the
// generation is replaced and its last in-flight call has returned.
//
// Use from the agent and the watcher:
//
//	m, err := plugins.NewManager(ctx, plugins.Options{Dir: dir, CacheDir: cache, Logger: log})
//	go m.Watch(ctx) // hot swap; m.Reload(ctx) on SIGHUP or `volhost module reload`
//	if name, ok := m.Match(abi.KindReleasePolicy, plugins.Target{Namespace: ns, VolumeID: id, PluginID: p}); ok {
//		resp, err := m.DecideRelease(ctx, name, req) // err: *FaultError (an attach.ModuleFault) or ctx's
//	}
//	defer m.Close(ctx)
//
// A call is stopped at its call_timeout (or when its caller gives up) by a
// flag the host sets and the guest checks: each module is instrumented at
// load (internal/wasmbin) so every function entry and loop header counts
// down a budget, enters Go every 64 probes, and traps once the flag is set.
// The original module is validated first, and a module the instrumenter
// cannot read is refused with the reason: there is no weaker fallback
// (RATIONALE.md "Call timeouts: the guest counts, the host flags"). Tables
// are bounded by limits.table_elements, and the agent's maxima (Maxima)
// bound every manifest.
package plugins
