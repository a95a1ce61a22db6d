// Command wasminfo lists a module's imports and exports with their wasm
// signatures, and with -smoke instantiates it under a minimal host (WASI
// without files, env or args; volhost.log and volhost.log_level) and calls
// its version, configure and decision exports once. It is how ABI.md's import
// list was taken and a quick check that an example obeys the ABI:
//
//	go run ./abi/internal/wasminfo -smoke examples/plugins/build/default-policy.wasm
//
// It is a development tool, not the product's runtime (that is plugins/).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/volhost/volhost/abi"
)

func main() {
	smoke := flag.Bool("smoke", false, "instantiate and call every export once")
	cfg := flag.String("config", "", "comma-separated k=v passed to volhost_configure with -smoke")
	flag.UintVar(&memoryPages, "pages", 256, "memory limit in 64 KiB pages with -smoke")
	flag.DurationVar(&callTimeout, "timeout", time.Second, "per-call timeout with -smoke (close on context done)")
	flag.IntVar(&repeat, "repeat", 0, "with -smoke: call volhost_decide_release this many more times and report time per call and memory")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: wasminfo [-smoke] [-config k=v,...] MODULE.wasm")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *smoke, *cfg); err != nil {
		fmt.Fprintln(os.Stderr, "wasminfo:", err)
		os.Exit(1)
	}
}

var (
	repeat      int
	memoryPages uint
	callTimeout time.Duration
)

func sig(d api.FunctionDefinition) string {
	names := func(ts []api.ValueType) string {
		var s []string
		for _, t := range ts {
			s = append(s, api.ValueTypeName(t))
		}
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("(%s) -> (%s)", names(d.ParamTypes()), names(d.ResultTypes()))
}

func run(path string, smoke bool, cfgFlag string) error {
	ctx := context.Background()
	wasm, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithMemoryLimitPages(uint32(memoryPages)).WithCloseOnContextDone(true))
	defer rt.Close(ctx)
	start := time.Now()
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return fmt.Errorf("compile: %w", err)
	}
	fmt.Printf("size %d bytes, compiled in %v\n", len(wasm), time.Since(start).Round(time.Millisecond))
	var lines []string
	for _, d := range cm.ImportedFunctions() {
		mod, name, _ := d.Import()
		lines = append(lines, fmt.Sprintf("import %s.%s %s", mod, name, sig(d)))
	}
	sort.Strings(lines)
	var exps []string
	for name, d := range cm.ExportedFunctions() {
		exps = append(exps, fmt.Sprintf("export %s %s", name, sig(d)))
	}
	sort.Strings(exps)
	for name, d := range cm.ExportedMemories() {
		exps = append(exps, fmt.Sprintf("export memory %s (min %d pages)", name, d.Min()))
	}
	fmt.Println(strings.Join(append(lines, exps...), "\n"))
	if !smoke {
		return nil
	}

	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	_, err = rt.NewHostModuleBuilder(abi.HostModule).
		NewFunctionBuilder().WithFunc(func(_ context.Context, m api.Module, level, ptr, n uint32) {
		b, _ := m.Memory().Read(ptr, n)
		fmt.Printf("guest log [%d]: %s\n", level, b)
	}).Export(abi.HostLog).
		NewFunctionBuilder().WithFunc(func() int32 { return abi.LogTrace }).Export(abi.HostLogLevel).
		Instantiate(ctx)
	if err != nil {
		return err
	}
	start = time.Now()
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithStartFunctions(abi.ExportInitialize).WithStdout(os.Stdout).WithStderr(os.Stderr))
	if err != nil {
		return fmt.Errorf("instantiate: %w", err)
	}
	fmt.Printf("instantiated in %v\n", time.Since(start).Round(time.Microsecond))
	v, err := mod.ExportedFunction(abi.ExportVersion).Call(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("abi version %d\n", int32(v[0]))

	call := func(export string, req abi.Message, resp abi.Message) error {
		f := mod.ExportedFunction(export)
		if f == nil {
			fmt.Printf("%s: not exported\n", export)
			return nil
		}
		in := req.MarshalAppend(nil)
		p, err := mod.ExportedFunction(abi.ExportBuffer).Call(ctx, uint64(len(in)))
		if err != nil {
			return err
		}
		if !mod.Memory().Write(uint32(p[0]), in) {
			return fmt.Errorf("buffer %d out of range", p[0])
		}
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		r, err := f.Call(cctx, uint64(len(in)))
		if err != nil {
			return fmt.Errorf("%s after %v: %w", export, time.Since(start), err)
		}
		el := time.Since(start)
		ptr, n := abi.UnpackResult(r[0])
		out, ok := mod.Memory().Read(ptr, n)
		if !ok {
			return fmt.Errorf("%s: result (%d,%d) out of range", export, ptr, n)
		}
		if err := resp.Unmarshal(out); err != nil {
			return err
		}
		fmt.Printf("%s (%v): %+v\n", export, el, resp)
		return nil
	}
	cfg := map[string]string{}
	for _, kv := range strings.Split(cfgFlag, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			cfg[k] = v
		}
	}
	if err := call(abi.ExportConfigure, &abi.ConfigureRequest{ModuleName: "smoke", Config: cfg}, &abi.ConfigureResponse{}); err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	preq := &abi.PolicyRequest{
		NowUnixMs: now,
		Volume:    abi.VolumeView{Namespace: "default", ID: "web", PluginID: "gcepd"},
		Claims: []abi.ClaimView{
			{AllocID: "a1", NodeID: "n1", State: "taken"}, {AllocID: "a2", NodeID: "n2", State: "taken"},
			{AllocID: "a3", NodeID: "n1", State: "taken"},
		},
		Allocs: []abi.AllocView{{ID: "a1", ClientStatus: "running"}, {ID: "a2", ClientStatus: "complete", TerminalAgeMs: 1000}, {ID: "a3", ClientStatus: "failed", TerminalAgeMs: 3_600_000}},
		Nodes:  []abi.NodeView{{ID: "n1", Status: "ready"}, {ID: "n2", Status: "down"}},
	}
	if err := call(abi.ExportDecideRelease, preq, &abi.PolicyResponse{}); err != nil {
		return err
	}
	if repeat > 0 {
		in := preq.MarshalAppend(nil)
		buf, decide := mod.ExportedFunction(abi.ExportBuffer), mod.ExportedFunction(abi.ExportDecideRelease)
		start := time.Now()
		maxMem := mod.Memory().Size()
		for i := 0; i < repeat; i++ {
			p, err := buf.Call(ctx, uint64(len(in)))
			if err != nil {
				return err
			}
			mod.Memory().Write(uint32(p[0]), in)
			_, err = decide.Call(ctx, uint64(len(in)))
			if err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
			maxMem = max(maxMem, mod.Memory().Size())
		}
		fmt.Printf("%d calls: %v per call, memory %d KiB (max %d KiB)\n", repeat,
			time.Since(start)/time.Duration(repeat), mod.Memory().Size()>>10, maxMem>>10)
	}
	areq := &abi.AdapterRequest{
		Step: "controller-unpublish", Claim: preq.Claims[1],
		Volume: abi.VolumeView{ExternalID: "projects/p/zones/z/disks/d"},
		Node:   abi.NodeView{ID: "n2", Meta: map[string]string{"gce.project": "p", "gce.zone": "z"}},
	}
	if err := call(abi.ExportAdaptRequest, areq, &abi.AdapterResponse{}); err != nil {
		return err
	}
	return call(abi.ExportClassifyError, &abi.ClassifyRequest{Step: "controller-unpublish", Code: 5}, &abi.ClassifyResponse{})
}
