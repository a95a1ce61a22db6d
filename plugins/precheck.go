package plugins

import (
	"fmt"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/plugins/internal/wasmbin"
)

// precheckImports reads the import section of a wasm binary, without
// compiling it, and refuses a module importing from anything but the
// volhost host module and the allowed WASI calls. Compiling a Go guest
// costs ~1.5 s (~19 s under -race), which a forbidden module should not
// get; signatures are still checked after compilation (validateImports).
// A binary it cannot parse is left to the compiler, which reports why.
func precheckImports(wasm []byte) error {
	imports, err := wasmbin.ImportNames(wasm)
	if err != nil {
		return nil // the compiler's error is the better message
	}
	for _, im := range imports {
		switch im[0] {
		case abi.HostModule:
			if _, ok := hostFuncs[im[1]]; !ok {
				return fmt.Errorf("imports %s.%s: the %s host module has only %s and %s", im[0], im[1], abi.HostModule, abi.HostLog, abi.HostLogLevel)
			}
		case wasiModule:
			if !allowedWASI[im[1]] {
				return fmt.Errorf("imports %s.%s: not one of the WASI calls a Go runtime needs (no network)", im[0], im[1])
			}
		default:
			return fmt.Errorf("imports %s.%s: only the %s host module and %s are allowed", im[0], im[1], abi.HostModule, wasiModule)
		}
	}
	return nil
}
