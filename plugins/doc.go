// Package plugins owns the WebAssembly side of volhost: it loads release-policy
// and csi-adapter modules (NAME.wasm + NAME.hcl) from a directory, validates
// them against the ABI in package abi, compiles them with a disk compilation
// cache, pools their instances under per-module limits (memory pages, call
// timeout, pool size, calls per instance), invokes them with fault isolation
// and a circuit breaker, hot-swaps new versions without dropping calls, and
// reports per-module status.
//
// Nothing here knows about volumes beyond the abi messages: the watcher
// (which imports this package, never the reverse) decides what to ask and
// validates the answers against its own invariants.
//
// One wazero runtime is created per module generation, because wazero's
// memory cap is per runtime (DESIGN "Wasm modules"), and it is closed once the
// generation is replaced and its last in-flight call has returned.
package plugins
