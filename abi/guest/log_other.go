//go:build !wasip1

package guest

// Off wasm there is no host: logging is a no-op so handlers that log can be
// unit-tested natively.

// Enabled reports whether the host records lines at level; always false off wasm.
func Enabled(level int32) bool { return false }

// Log writes msg at level through the host's logger; a no-op off wasm.
func Log(level int32, msg string) {}
