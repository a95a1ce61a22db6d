package attach

import (
	"errors"
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// How a module's failure is named on a claim (structs.ClaimError). The
// claim path refuses a claim with the same ClaimError a release records
// on its claim, so an operator reads one fault, named one way, whichever
// direction met it.

// Module fault kinds the host itself assigns (the Wasm runtime adds trap,
// timeout, oom, abi and open-circuit through ModuleFault).
const (
	FaultUnsafe    = "unsafe"     // a decision that breaks the host's safety rules
	FaultBadOutput = "bad-output" // an answer the host cannot use
	FaultError     = "error"      // a plain error from a module without a ModuleFault
)

// StepAdapter names the adapter's part of a claim step in ClaimError.Step.
const StepAdapter = "adapter"

// Named is implemented by a Policy or Adapter that can say which module it
// is, so a claim's last error names it even when the fault is found by the
// host's validation rather than raised by the module call itself.
type Named interface {
	ModuleName() string
	ModuleVersion() string
}

// ModuleFault is implemented by errors from a Wasm module call, so the claim's
// last error can name the module, its version and the kind of fault.
type ModuleFault interface {
	error
	ModuleName() string
	ModuleVersion() string
	FaultKind() string
}

// ModuleOf names module mod (a Policy or an Adapter): its name and
// version when it is Named, else its Go type.
func ModuleOf(mod any) (name, version string) {
	if n, ok := mod.(Named); ok {
		return n.ModuleName(), n.ModuleVersion()
	}
	return fmt.Sprintf("%T", mod), ""
}

// Fault is a module fault the host found by validating mod's answer.
func Fault(mod any, step, kind, format string, args ...any) *structs.ClaimError {
	e := &structs.ClaimError{Kind: structs.ErrorModule, Step: step, Fault: kind, Message: fmt.Sprintf(format, args...)}
	if n, ok := mod.(Named); ok {
		e.Module, e.ModuleVersion = n.ModuleName(), n.ModuleVersion()
	}
	return e
}

// ModuleError describes a failed call of module mod, naming the module,
// version and fault kind from a ModuleFault when the error carries one;
// a GuestError or a BadOutput is the module's bad output.
func ModuleError(mod any, step string, err error) *structs.ClaimError {
	e := &structs.ClaimError{Kind: structs.ErrorModule, Step: step, Fault: FaultError, Message: err.Error()}
	if n, ok := mod.(Named); ok {
		e.Module, e.ModuleVersion = n.ModuleName(), n.ModuleVersion()
	}
	var bo *badOutput
	var ge *guestError
	var mf ModuleFault
	switch {
	case errors.As(err, &mf):
		e.Module, e.ModuleVersion, e.Fault = mf.ModuleName(), mf.ModuleVersion(), mf.FaultKind()
	case errors.As(err, &bo), errors.As(err, &ge):
		e.Fault = FaultBadOutput
	}
	return e
}

// GuestError is a response whose Error field is set: the module says it
// could not decide.
func GuestError(msg string) error { return &guestError{msg: msg} }

// BadOutput is an answer the host cannot use.
func BadOutput(msg string) error { return &badOutput{msg: msg} }

type guestError struct{ msg string }

func (e *guestError) Error() string { return "module error: " + e.msg }

type badOutput struct{ msg string }

func (e *badOutput) Error() string { return "bad output: " + e.msg }
