package plugins

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/volhost/volhost/abi"
)

// wasiModule is the WASI module name Go's wasip1 port imports from.
const wasiModule = "wasi_snapshot_preview1"

// allowedWASI are the wasi_snapshot_preview1 functions Go's wasip1 runtime
// and syscall package import. They are harmless here because every instance
// gets no preopened directory, no environment and no arguments (a module
// gets no files, no network and no environment). The sock_* calls
// are not allowed: a module has no business with the network.
var allowedWASI = map[string]bool{
	"args_get": true, "args_sizes_get": true, "clock_time_get": true,
	"environ_get": true, "environ_sizes_get": true, "fd_close": true,
	"fd_fdstat_get": true, "fd_fdstat_set_flags": true, "fd_fdstat_set_rights": true,
	"fd_filestat_get": true, "fd_filestat_set_size": true, "fd_pread": true,
	"fd_prestat_dir_name": true, "fd_prestat_get": true, "fd_pwrite": true,
	"fd_read": true, "fd_readdir": true, "fd_seek": true, "fd_sync": true,
	"fd_write": true, "path_create_directory": true, "path_filestat_get": true,
	"path_filestat_set_times": true, "path_link": true, "path_open": true,
	"path_readlink": true, "path_remove_directory": true, "path_rename": true,
	"path_symlink": true, "path_unlink_file": true, "poll_oneoff": true,
	"proc_exit": true, "random_get": true, "sched_yield": true,
}

// hostFuncs are the volhost host functions with their signatures.
var hostFuncs = map[string]struct{ params, results []api.ValueType }{
	abi.HostLog:      {[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, nil},
	abi.HostLogLevel: {nil, []api.ValueType{api.ValueTypeI32}},
}

// maxLogLine bounds one guest log line so a module cannot flood the logs
// with a single huge message.
const maxLogLine = 1 << 10

// instantiateHostModules adds the volhost host module and WASI to a
// generation's runtime. log routes the guest's lines into logger, which
// carries the module's name and version.
func instantiateHostModules(ctx context.Context, rt wazero.Runtime, logger hclog.Logger) error {
	_, err := rt.NewHostModuleBuilder(abi.HostModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, mod api.Module, stack []uint64) {
			level := hclog.Level(api.DecodeI32(stack[0]))
			ptr, n := api.DecodeU32(stack[1]), api.DecodeU32(stack[2])
			truncated := false
			if n > maxLogLine {
				n, truncated = maxLogLine, true
			}
			b, ok := mod.Memory().Read(ptr, n)
			if !ok {
				// A bad pointer is the guest's bug; say so rather than trap
				// the call, which would cost a decision for a log line.
				logger.Warn("guest log with out-of-range buffer", "ptr", ptr, "len", n)
				return
			}
			msg := strings.ToValidUTF8(string(b), "?")
			if truncated {
				msg += "…"
			}
			switch {
			case level <= hclog.Trace:
				logger.Trace(msg)
			case level == hclog.Debug:
				logger.Debug(msg)
			case level == hclog.Info:
				logger.Info(msg)
			case level == hclog.Warn:
				logger.Warn(msg)
			default:
				logger.Error(msg)
			}
		}), hostFuncs[abi.HostLog].params, hostFuncs[abi.HostLog].results).
		Export(abi.HostLog).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
			stack[0] = api.EncodeI32(int32(logger.GetLevel()))
		}), hostFuncs[abi.HostLogLevel].params, hostFuncs[abi.HostLogLevel].results).
		Export(abi.HostLogLevel).
		Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("instantiate host module %s: %w", abi.HostModule, err)
	}
	// The plain WASI module with no FS, env or args configured: those come
	// from each instance's ModuleConfig, which sets none.
	if _, err := wazeroWASI(ctx, rt); err != nil {
		return fmt.Errorf("instantiate %s: %w", wasiModule, err)
	}
	return nil
}

// validateImports refuses a module importing anything outside the volhost
// host module and the allowed WASI calls, naming the first offender.
func validateImports(c wazero.CompiledModule) error {
	for _, f := range c.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch mod {
		case abi.HostModule:
			sig, ok := hostFuncs[name]
			if !ok {
				return fmt.Errorf("imports %s.%s: the %s host module has only %s and %s", mod, name, abi.HostModule, abi.HostLog, abi.HostLogLevel)
			}
			if !sameTypes(f.ParamTypes(), sig.params) || !sameTypes(f.ResultTypes(), sig.results) {
				return fmt.Errorf("imports %s.%s with signature %s, want %s", mod, name,
					signature(f.ParamTypes(), f.ResultTypes()), signature(sig.params, sig.results))
			}
		case wasiModule:
			if !allowedWASI[name] {
				return fmt.Errorf("imports %s.%s: not one of the WASI calls a Go runtime needs (no network)", mod, name)
			}
		default:
			return fmt.Errorf("imports %s.%s: only the %s host module and %s are allowed", mod, name, abi.HostModule, wasiModule)
		}
	}
	for _, m := range c.ImportedMemories() {
		mod, name, _ := m.Import()
		return fmt.Errorf("imports memory %s.%s: a module must define its own memory", mod, name)
	}
	return nil
}

// requiredByKind is requiredExports of each kind, built once: every call
// asks it whether its export resolves (a map built per call was a
// measurable part of a decision call's host side: BenchmarkHostPath). Read
// only.
var requiredByKind = map[abi.Kind]map[string][2][]api.ValueType{
	abi.KindReleasePolicy: requiredExports(abi.KindReleasePolicy),
	abi.KindCSIAdapter:    requiredExports(abi.KindCSIAdapter),
}

// requiredExports lists each kind's exports and signatures (abi.go).
func requiredExports(kind abi.Kind) map[string][2][]api.ValueType {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	decision := [2][]api.ValueType{{i32}, {i64}}
	req := map[string][2][]api.ValueType{
		abi.ExportVersion:   {nil, {i32}},
		abi.ExportBuffer:    {{i32}, {i32}},
		abi.ExportConfigure: decision,
	}
	switch kind {
	case abi.KindReleasePolicy:
		req[abi.ExportDecideRelease] = decision
	case abi.KindCSIAdapter:
		req[abi.ExportAdaptRequest] = decision
		req[abi.ExportClassifyError] = decision
	}
	return req
}

// validateExports checks the exports a module of kind must have, and the
// optional _initialize reactor start function's signature.
func validateExports(c wazero.CompiledModule, kind abi.Kind) error {
	exp := c.ExportedFunctions()
	for name, sig := range requiredExports(kind) {
		f, ok := exp[name]
		if !ok {
			return fmt.Errorf("missing export %s (a %s module must export it)", name, kind)
		}
		if !sameTypes(f.ParamTypes(), sig[0]) || !sameTypes(f.ResultTypes(), sig[1]) {
			return fmt.Errorf("export %s has signature %s, want %s", name,
				signature(f.ParamTypes(), f.ResultTypes()), signature(sig[0], sig[1]))
		}
	}
	if f, ok := exp[abi.ExportInitialize]; ok && (len(f.ParamTypes()) != 0 || len(f.ResultTypes()) != 0) {
		return fmt.Errorf("export %s has signature %s, want () -> ()", abi.ExportInitialize,
			signature(f.ParamTypes(), f.ResultTypes()))
	}
	if _, ok := c.ExportedMemories()["memory"]; !ok {
		return fmt.Errorf("missing export memory")
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func signature(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(params) + ") -> (" + names(results) + ")"
}
