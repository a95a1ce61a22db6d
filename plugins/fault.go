package plugins

import (
	"errors"
	"fmt"
)

// FaultKind names how a module call failed. The values are stable strings:
// they travel into claim errors, events and metrics.
type FaultKind string

const (
	// FaultTrap: the guest trapped (unreachable, a Go runtime fatal error,
	// proc_exit, out-of-bounds access inside the guest).
	FaultTrap FaultKind = "trap"
	// FaultTimeout: the call ran past the manifest's call_timeout.
	FaultTimeout FaultKind = "timeout"
	// FaultOOM: the guest ran out of memory under the manifest's memory cap.
	FaultOOM FaultKind = "oom"
	// FaultTableLimit: the guest tried to grow a table past the manifest's
	// limits.table_elements (the host's guard trapped it).
	FaultTableLimit FaultKind = "table-limit"
	// FaultABI: the guest broke the ABI contract (missing export, result
	// outside its memory, a buffer too small for the request).
	FaultABI FaultKind = "abi"
	// FaultBadOutput: the response did not decode, or answered for claims
	// the request did not contain.
	FaultBadOutput FaultKind = "bad-output"
	// FaultGuestError: the guest answered with its Error field set (for a Go
	// guest also a recovered panic).
	FaultGuestError FaultKind = "guest-error"
	// FaultOpenCircuit: the module's circuit breaker is open; the call was
	// not attempted (fail closed: the caller must not act on it).
	FaultOpenCircuit FaultKind = "open-circuit"
	// FaultNotLoaded: no module of that name is serving (never loaded,
	// refused, retired, or the manager is closed).
	FaultNotLoaded FaultKind = "not-loaded"
)

// FaultError is the typed error of a failed module call. It implements the
// host's ModuleFault interface (watcher/attach: ModuleName, ModuleVersion,
// FaultKind) so a claim's last error names the module, its version and the kind of fault,
// instead of matching strings across layers (the reference scheduler's
// opaque errors, hashicorp/nomad#27324).
type FaultError struct {
	Module  string
	Version string
	// Generation is the generation that faulted (0 when none was asked).
	Generation uint64
	Kind       FaultKind
	// Err is the underlying cause (a wazero error, a decode error, or the
	// guest's own Error string for FaultGuestError).
	Err error
	// Output is the guest's captured stdout/stderr (bounded, most recent
	// bytes), which for a Go guest holds the panic or fatal error text.
	Output string
}

// Error implements error.
func (e *FaultError) Error() string {
	s := fmt.Sprintf("module %s", e.Module)
	if e.Version != "" {
		s += " " + e.Version
	}
	s += ": " + string(e.Kind)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.Output != "" {
		s += " (guest output: " + e.Output + ")"
	}
	return s
}

// Unwrap returns the underlying cause.
func (e *FaultError) Unwrap() error { return e.Err }

// ModuleName is the module's name (its file name without .wasm).
func (e *FaultError) ModuleName() string { return e.Module }

// ModuleGeneration is the generation that faulted.
func (e *FaultError) ModuleGeneration() uint64 { return e.Generation }

// ModuleVersion is the version from the module's manifest.
func (e *FaultError) ModuleVersion() string { return e.Version }

// FaultKind is the kind of fault as a string (see the FaultKind constants).
func (e *FaultError) FaultKind() string { return string(e.Kind) }

// countsForBreaker reports whether the fault says something about the
// module's health. Open-circuit and not-loaded faults are the host's own
// refusals and must not keep a breaker open.
func (k FaultKind) countsForBreaker() bool {
	return k != FaultOpenCircuit && k != FaultNotLoaded
}

// faultOf is errors.As for a *FaultError, or nil. The successful call, the
// common one, returns before the target variable exists: errors.As takes
// its address as an interface, so a `var fe *FaultError` on the call path
// was a heap allocation per call, three a decision (TestDecideReleaseAllocs).
func faultOf(err error) *FaultError {
	if err == nil {
		return nil
	}
	var fe *FaultError
	if errors.As(err, &fe) {
		return fe
	}
	return nil
}
