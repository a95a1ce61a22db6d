package plugins

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/plugins/internal/wasmbin"
)

// BenchmarkProbeVariants measures what the preemption probes
// (wasmbin.Preempt) cost one 8-claim decision, per guest language, by
// running the same module in several builds in one process, in interleaved
// rounds (each round runs 200 calls of every variant in turn, ten times),
// so the per-round ratios share the machine's load. "none" is the module as built, without
// probes (what no host may run: it cannot be stopped); "old" is the probe
// as it was before the probes were made cheaper (legacyPreempt: every probe
// takes 1 of a budget of 64, every bulk operation 16); "new" is the host's
// own (the instrument function Manager uses). The other variants take one
// part away from "old" or change one parameter of "new", to show where
// the cost is: "old-no-depth" has no call depth bound, "old-loops-only" no
// entry probes, "old-interval-1024" enters Go every 1,024 probes instead
// of 64; "new-unweighted" charges every probe 1 whatever its static cost
// (no wasmbin.PreemptUnit), "new-budget-N" has a budget of N instead of
// wasmbin.PreemptBudget. Each build runs in a runtime of its own through
// volhost_buffer and the export, as the host calls it, without the
// Manager's pool and checks (BenchmarkGuestCost has those).
//
//	go test -run '^$' -bench ProbeVariants -benchtime 1x ./plugins/
//
// VOLHOST_ROUNDS sets the number of rounds (default 7).
func BenchmarkProbeVariants(b *testing.B) {
	type variant struct {
		name       string
		instrument func(wasm []byte) ([]byte, error)
	}
	legacy := func(mod func(*wasmbin.Probe)) func([]byte) ([]byte, error) {
		return func(wasm []byte) ([]byte, error) {
			p := legacyPreempt(64)
			p.TableLimit, p.DepthLimit = 100_000, MaxCallDepth
			if mod != nil {
				mod(&p)
			}
			return wasmbin.Instrument(wasm, p)
		}
	}
	budgeted := func(budget, unit int32) func([]byte) ([]byte, error) {
		return func(wasm []byte) ([]byte, error) {
			p := wasmbin.NewPreempt(budget, unit)
			p.TableLimit, p.DepthLimit = 100_000, MaxCallDepth
			return wasmbin.Instrument(wasm, p)
		}
	}
	variants := []variant{
		{"none", func(wasm []byte) ([]byte, error) { return wasm, nil }},
		{"old", legacy(nil)},
		{"new", func(wasm []byte) ([]byte, error) { return instrument(wasm, 100_000) }},
		{"old-no-depth", legacy(func(p *wasmbin.Probe) { p.DepthCode = nil })},
		{"old-loops-only", legacy(func(p *wasmbin.Probe) { p.FunctionEntry = false })},
		{"new-unweighted", budgeted(wasmbin.PreemptBudget, 1<<30)},
		{"new-budget-64", budgeted(64, wasmbin.PreemptUnit)},
		{"new-budget-1024", budgeted(1024, wasmbin.PreemptUnit)},
		{"old-interval-1024", legacy(func(p *wasmbin.Probe) {
			p.Code = legacyPreempt(1024).Code
			p.Globals = legacyPreempt(1024).Globals
		})},
	}
	rounds := envRounds(b, 7)
	const calls, slicesPerRound = 2000, 10
	const perSlice = calls / slicesPerRound
	req := volumeRequest(8).MarshalAppend(nil)
	for _, module := range []string{"default-policy", "as-default-policy"} {
		b.Run(module, func(b *testing.B) {
			wasm := exampleWasm(b, module)
			callers := make([]*probeCaller, len(variants))
			for i, v := range variants {
				w, err := v.instrument(wasm)
				if err != nil {
					b.Fatalf("%s: %v", v.name, err)
				}
				callers[i] = newProbeCaller(b, w, abi.ExportDecideRelease)
				for range 200 { // the first calls grow the guest's heap
					callers[i].call(b, req)
				}
			}
			p50 := make([][]float64, len(variants))
			mean := make([][]float64, len(variants))
			d := make([][]time.Duration, len(variants))
			for i := range d {
				d[i] = make([]time.Duration, calls)
			}
			for b.Loop() {
				for range rounds {
					// A round is slices of calls/slices calls per variant in
					// turn, so that the variants of one round sample the same
					// stretch of the machine's load.
					for k := range slicesPerRound {
						for i, c := range callers {
							for j := k * perSlice; j < (k+1)*perSlice; j++ {
								t0 := time.Now()
								c.call(b, req)
								d[i][j] = time.Since(t0)
							}
						}
					}
					for i := range callers {
						var sum time.Duration
						for _, x := range d[i] {
							sum += x
						}
						slices.Sort(d[i])
						p50[i] = append(p50[i], float64(d[i][calls/2].Nanoseconds()))
						mean[i] = append(mean[i], float64(sum.Nanoseconds())/calls)
					}
				}
			}
			ratio := func(xs [][]float64, num, den int) (med, lo, hi float64) {
				r := testutil.SpreadOf(testutil.Ratios(xs[num], xs[den]))
				return r.Median, r.Min, r.Max
			}
			// The testing package keeps 10 lines of a benchmark's log: the
			// summary first, then a line per variant.
			m, lo, hi := ratio(p50, 2, 1)
			mm, mlo, mhi := ratio(mean, 2, 1)
			// The probes' own cost: (x - none) / (old - none), per round.
			o := make([]float64, len(p50[0]))
			for k := range o {
				o[k] = (p50[2][k] - p50[0][k]) / (p50[1][k] - p50[0][k])
			}
			b.Logf("%s, 8 claims, %d interleaved rounds of %d calls per variant; per-round ratios median [min-max]; new/old p50 %.3f [%.3f-%.3f] mean %.3f [%.3f-%.3f]; new's probe overhead over old's (p50) %.3f [%.3f-%.3f]",
				module, rounds, calls, m, lo, hi, mm, mlo, mhi, testutil.SpreadOf(o).Median, slices.Min(o), slices.Max(o))
			for i, v := range variants {
				line := "  %-18s p50 %7.0f ns [%.0f-%.0f]  mean %7.0f ns"
				sp := testutil.SpreadOf(p50[i])
				args := []any{v.name, sp.Median, sp.Min, sp.Max, testutil.SpreadOf(mean[i]).Median}
				if i > 0 {
					m, lo, hi := ratio(p50, i, 0)
					mm, mlo, mhi := ratio(mean, i, 0)
					line += "  /none p50 %.3f [%.3f-%.3f] mean %.3f [%.3f-%.3f]"
					args = append(args, m, lo, hi, mm, mlo, mhi)
				}
				b.Logf(line, args...)
			}
			b.ReportMetric(testutil.SpreadOf(p50[0]).Median, "none-p50-ns")
			b.ReportMetric(testutil.SpreadOf(p50[1]).Median, "old-p50-ns")
			b.ReportMetric(testutil.SpreadOf(p50[2]).Median, "new-p50-ns")
			b.ReportMetric(m, "new/old-p50")
			b.ReportMetric(mm, "new/old-mean")
		})
	}
}

// probeCaller calls one export of one instance the way the host does
// (volhost_buffer, write the request, the export), without allocating.
type probeCaller struct {
	ctx            context.Context
	mod            api.Module
	buffer, export api.Function
	stack          []uint64
}

func newProbeCaller(tb testing.TB, wasm []byte, export string) *probeCaller {
	tb.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig())
	tb.Cleanup(func() { _ = rt.Close(ctx) })
	if err := instantiateHostModules(ctx, rt, hclog.NewNullLogger()); err != nil {
		tb.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions())
	if err != nil {
		tb.Fatal(err)
	}
	for _, start := range []string{wasmbin.StartExport, abi.ExportInitialize} {
		if f := mod.ExportedFunction(start); f != nil {
			if _, err := f.Call(ctx); err != nil {
				tb.Fatalf("%s: %v", start, err)
			}
		}
	}
	return &probeCaller{ctx: ctx, mod: mod, buffer: mod.ExportedFunction(abi.ExportBuffer),
		export: mod.ExportedFunction(export), stack: make([]uint64, 2)}
}

func (c *probeCaller) call(tb testing.TB, req []byte) {
	c.stack[0] = uint64(len(req))
	if err := c.buffer.CallWithStack(c.ctx, c.stack); err != nil || c.stack[0] == 0 {
		tb.Fatalf("volhost_buffer: %v", err)
	}
	if !c.mod.Memory().Write(uint32(c.stack[0]), req) {
		tb.Fatal("request does not fit guest memory")
	}
	c.stack[0] = uint64(len(req))
	if err := c.export.CallWithStack(c.ctx, c.stack); err != nil {
		tb.Fatal(err)
	}
	if _, n := abi.UnpackResult(c.stack[0]); n == 0 {
		tb.Fatal("empty response")
	}
}

// legacyPreempt is wasmbin.Preempt as it was before the probes were made cheaper,
// with the given interval, for BenchmarkProbeVariants' "old": at every
// function entry and loop header it reads the budget, enters Go and checks
// the flag when it is spent (refilling it), then reads it again and takes
// one; a bulk operation takes interval/4, whatever its length. The depth
// code and the table-grow guard are copies of the current ones too (the
// depth code kept here so that "old" stays what it was if they change).
func legacyPreempt(interval int32) wasmbin.Probe {
	p := wasmbin.NewPreempt(interval-1, 1)
	p.BulkCode = func(b []byte, flag, _ uint32) []byte { // took interval/4
		budget := uint64(flag + 1)
		b = protowire.AppendVarint(append(b, 0x23), budget)
		b = sleb(append(b, 0x41), int64(interval/4))
		return protowire.AppendVarint(append(b, 0x6b, 0x24), budget)
	}
	p.Code = func(b []byte, flag, _ uint32) []byte {
		budget := uint64(flag + 1)
		b = protowire.AppendVarint(append(b, 0x23), budget)       // global.get budget
		b = append(b, 0x41, 0x01, 0x48, 0x04, 0x40)               // i32.const 1; i32.lt_s; if (spent)
		b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a)               // memory.grow 0 pages (enters Go); drop
		b = protowire.AppendVarint(append(b, 0x23), uint64(flag)) // global.get flag
		b = append(b, 0x04, 0x40, 0x00, 0x0b)                     // if: unreachable; end
		b = sleb(append(b, 0x41), int64(interval))                // i32.const interval
		b = protowire.AppendVarint(append(b, 0x24), budget)       // global.set budget
		b = append(b, 0x0b)                                       // end
		b = protowire.AppendVarint(append(b, 0x23), budget)       // global.get budget
		b = append(b, 0x41, 0x01, 0x6b)                           // i32.const 1; i32.sub
		return protowire.AppendVarint(append(b, 0x24), budget)    // global.set budget
	}
	p.DepthCode = func(flag, limit uint32) (enter, exit []byte) {
		breach, depth := uint64(flag+2), uint64(flag+4)
		step := func(op byte) []byte {
			b := protowire.AppendVarint([]byte{0x23}, depth)
			b = append(b, 0x41, 0x01, op)
			return protowire.AppendVarint(append(b, 0x24), depth)
		}
		enter = step(0x6a)
		enter = protowire.AppendVarint(append(enter, 0x23), depth)
		enter = sleb(append(enter, 0x41), int64(int32(limit)))
		enter = append(enter, 0x4b, 0x04, 0x40) // i32.gt_u; if
		enter = sleb(append(enter, 0x41), wasmbin.BreachDepth)
		enter = protowire.AppendVarint(append(enter, 0x24), breach)
		enter = append(enter, 0x00, 0x0b)
		return enter, step(0x6b)
	}
	return p
}

// envRounds is VOLHOST_ROUNDS, or def; BENCHMARKS.md's ratios need at least 5.
func envRounds(tb testing.TB, def int) int {
	s := os.Getenv("VOLHOST_ROUNDS")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 5 {
		tb.Fatalf("VOLHOST_ROUNDS=%q: want a number, at least 5", s)
	}
	return n
}
