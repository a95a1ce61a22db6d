package wasmbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Hand-assembled test modules. vec prefixes a count; sec frames a section.
func vec(items ...[]byte) []byte {
	out := appendU32(nil, uint32(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func sec(id byte, data []byte) []byte {
	return append(appendU32([]byte{id}, uint32(len(data))), data...)
}

func name(s string) []byte { return append(appendU32(nil, uint32(len(s))), s...) }

func body(locals []byte, code ...byte) []byte {
	b := append(append([]byte(nil), locals...), code...)
	return append(appendU32(nil, uint32(len(b))), b...)
}

func module(sections ...[]byte) []byte {
	return append([]byte(header), bytes.Join(sections, nil)...)
}

// testModule imports env.started (function 0) and exports three functions;
// it has no global section: Instrument must create one.
//
//	spin()        calls started, then loops forever
//	fan(n i32)    calls started, then itself twice with n-1 until n is 0:
//	              2^n calls and no loop
//	count(n i32) -> i32   a loop with a block parameter, returning 3n
func testModule() []byte {
	types := sec(1, vec(
		[]byte{0x60, 0x00, 0x00},             // 0: () -> ()
		[]byte{0x60, 0x01, 0x7f, 0x00},       // 1: (i32) -> ()
		[]byte{0x60, 0x01, 0x7f, 0x01, 0x7f}, // 2: (i32) -> (i32)
	))
	imports := sec(2, vec(append(append(name("env"), name("started")...), 0x00, 0)))
	funcs := sec(3, vec([]byte{0}, []byte{1}, []byte{2}))
	memory := sec(5, vec([]byte{0x00, 0x01})) // one page, no maximum
	exports := sec(7, vec(
		append(name("spin"), 0x00, 1),
		append(name("fan"), 0x00, 2),
		append(name("count"), 0x00, 3),
	))
	code := sec(10, vec(
		body([]byte{0}, 0x10, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b),
		body([]byte{0},
			0x10, 0x00, // started()
			0x20, 0x00, 0x04, 0x40, // local.get 0; if
			0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x02, // fan(n-1)
			0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x02, // fan(n-1)
			0x0b, 0x0b),
		body([]byte{1, 2, 0x7f}, // locals 1 (tmp) and 2 (sum), i32
			0x20, 0x00, // local.get 0
			0x03, 0x02, // loop (type 2): the counter is the loop's parameter
			0x20, 0x02, 0x41, 0x03, 0x6a, 0x21, 0x02, // sum += 3
			0x41, 0x01, 0x6b, 0x22, 0x01, // n-1, local.tee 1
			0x20, 0x01, 0x0d, 0x00, // br_if 0 with n-1 as the parameter
			0x0b,       // end loop: n-1 (0) left
			0x1a,       // drop
			0x20, 0x02, // local.get 2
			0x0b),
	))
	return module(types, imports, funcs, memory, exports, code)
}

// instantiate runs wasm (a testModule) in a runtime without
// close-on-context-done; env.started sends on the returned channel, without
// blocking.
func instantiate(t *testing.T, wasm []byte) (api.Module, <-chan struct{}) {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = rt.Close(ctx) })
	started := make(chan struct{}, 1)
	_, err := rt.NewHostModuleBuilder("env").NewFunctionBuilder().WithFunc(func() {
		select {
		case started <- struct{}{}:
		default:
		}
	}).Export("started").Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	return mod, started
}

func TestPreemptStopsLoopsAndRecursion(t *testing.T) {
	wasm, err := Instrument(testModule(), Preempt)
	if err != nil {
		t.Fatal(err)
	}
	mod, started := instantiate(t, wasm)
	flag, ok := mod.ExportedGlobal(PreemptExport).(api.MutableGlobal)
	if !ok {
		t.Fatalf("no mutable %s export", PreemptExport)
	}
	ctx := context.Background()

	// The semantics are kept while the flag is clear.
	res, err := mod.ExportedFunction("count").Call(ctx, 7)
	if err != nil || res[0] != 21 {
		t.Fatalf("count(7) = %v, %v; want 21", res, err)
	}
	if _, err := mod.ExportedFunction("fan").Call(ctx, 4); err != nil {
		t.Fatalf("fan(4): %v", err)
	}
	<-started

	// A spinning loop and a 2^60-call recursion are stopped by the flag.
	for _, fn := range []struct {
		name string
		arg  []uint64
	}{{"spin", nil}, {"fan", []uint64{60}}} {
		t.Run(fn.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := mod.ExportedFunction(fn.name).Call(ctx, fn.arg...)
				done <- err
			}()
			// A garbage collection while the guest runs completes: its
			// stop-the-world needs the guest's thread to enter Go, which
			// compiled wasm does only at a call out (a hang here ends with
			// the test binary's timeout). Then the flag, set from another
			// goroutine once the call runs, as the host's interrupt does,
			// ends the call with the unreachable trap.
			<-started
			runtime.GC()
			flag.Set(1)
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "unreachable") {
					t.Fatalf("err = %v, want the unreachable trap", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the flag did not stop the call")
			}
			flag.Set(0)
		})
	}
}

func TestInstrumentKeepsIndicesAndSections(t *testing.T) {
	// A module with an imported global and its own global and export
	// sections: the new global comes after both, existing indices stay.
	types := sec(1, vec([]byte{0x60, 0x00, 0x01, 0x7f}))
	imports := sec(2, vec(append(append(name("env"), name("g")...), 0x03, 0x7f, 0x00)))
	funcs := sec(3, vec([]byte{0}))
	memory := sec(5, vec([]byte{0x00, 0x01}))
	globals := sec(6, vec([]byte{0x7f, 0x00, 0x41, 0x05, 0x0b}))
	exports := sec(7, vec(append(name("sum"), 0x00, 0)))
	custom := sec(0, append(name("note"), 'x'))
	code := sec(10, vec(body([]byte{0}, 0x23, 0x00, 0x23, 0x01, 0x6a, 0x0b))) // g0 + g1
	wasm, err := Instrument(module(types, imports, custom, funcs, memory, globals, exports, code), Preempt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	env := module(sec(6, vec([]byte{0x7f, 0x00, 0x41, 0x02, 0x0b})), sec(7, vec(append(name("g"), 0x03, 0))))
	if _, err := rt.InstantiateWithConfig(ctx, env, wazero.NewModuleConfig().WithName("env")); err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	res, err := mod.ExportedFunction("sum").Call(ctx)
	if err != nil || res[0] != 7 {
		t.Fatalf("sum() = %v, %v; want 7", res, err)
	}
	if mod.ExportedGlobal(PreemptExport) == nil {
		t.Fatal("no preempt export")
	}
}

func TestInstrumentRefuses(t *testing.T) {
	types := sec(1, vec([]byte{0x60, 0x00, 0x00}))
	funcs := sec(3, vec([]byte{0}))
	memory := sec(5, vec([]byte{0x00, 0x01}))
	for _, tc := range []struct {
		name    string
		wasm    []byte
		want    error
		message string
	}{
		{"not wasm", []byte("hello world"), ErrFormat, ""},
		{"truncated section", append([]byte(header), 10, 50, 1), ErrFormat, ""},
		{"reserved export", module(types, funcs, memory,
			sec(7, vec(append(name(PreemptExport), 0x00, 0))),
			sec(10, vec(body([]byte{0}, 0x0b)))), nil, "are the host's"},
		{"reserved export prefix", module(types, funcs, memory,
			sec(7, vec(append(name(StartExport), 0x00, 0))),
			sec(10, vec(body([]byte{0}, 0x0b)))), nil, "are the host's"},
		{"exception handling", module(types, funcs, memory,
			sec(10, vec(body([]byte{0}, 0x06, 0x40, 0x0b, 0x0b)))), ErrUnsupported, "0x6"},
		{"no memory", module(types, funcs,
			sec(10, vec(body([]byte{0}, 0x0b)))), ErrUnsupported, "memory"},
		{"truncated body", module(types, funcs, memory,
			sec(10, vec(body([]byte{0}, 0x41)))), ErrFormat, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Instrument(tc.wasm, Preempt)
			if err == nil {
				t.Fatal("instrumented")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.message)
			}
		})
	}
}

// hostileSeeds are modules Instrument must not turn into something else:
// each is a way out of the probe's bounds if the instrumenter got it wrong.
func hostileSeeds() map[string][]byte {
	types := sec(1, vec([]byte{0x60, 0x00, 0x00}))
	funcs := sec(3, vec([]byte{0}))
	memory := sec(5, vec([]byte{0x00, 0x01}))
	one := sec(6, vec([]byte{0x7f, 0x01, 0x41, 0x00, 0x0b})) // one mutable i32 global
	return map[string][]byte{
		// Invalid alone: global 1 does not exist; in the copy it is the
		// host's flag and global 2 its budget, refilled every iteration.
		"budget refill": module(types, funcs, memory, one,
			sec(10, vec(body([]byte{0}, 0x03, 0x40, 0x41, 0x3f, 0x24, 0x02, 0x0c, 0x00, 0x0b, 0x0b)))),
		"flag read": module(types, funcs, memory, one,
			sec(10, vec(body([]byte{0}, 0x23, 0x01, 0x1a, 0x0b)))),
		"export a host global": module(types, funcs, memory, one,
			sec(7, vec(append(name("g"), 0x03, 0x02))),
			sec(10, vec(body([]byte{0}, 0x0b)))),
		"start section": module(types, funcs, memory, sec(8, []byte{0}),
			sec(10, vec(body([]byte{0}, 0x0b)))),
		"table.grow": module(types, funcs,
			sec(4, vec([]byte{0x70, 0x00, 0x01})), memory,
			sec(10, vec(body([]byte{0}, 0xd0, 0x70, 0x41, 0x80, 0x80, 0x80, 0x20, 0xfc, 0x0f, 0x00, 0x1a, 0x0b)))),
	}
}

// FuzzInstrument: Instrument never panics, and its output validates if
// and only if its input does (differential: wazero's validator on both).
// The hostile seeds run in every `go test` (make test).
func FuzzInstrument(f *testing.F) {
	f.Add(testModule())
	f.Add(module(sec(1, vec([]byte{0x60, 0x00, 0x00})), sec(3, vec([]byte{0})), sec(5, vec([]byte{0x00, 0x01})),
		sec(10, vec(body([]byte{0}, 0x02, 0x40, 0x03, 0x40, 0x0c, 0x01, 0x0b, 0x0b, 0x0b)))))
	for _, k := range slices.Sorted(maps.Keys(hostileSeeds())) {
		f.Add(hostileSeeds()[k])
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	// compile is CompileModule with wazero's own panics (its validator
	// panics on some malformed binaries: testdata/fuzz) as errors.
	compile := func(b []byte) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("wazero panicked: %v", r)
			}
		}()
		c, err := rt.CompileModule(ctx, b)
		if err == nil {
			_ = c.Close(ctx)
		}
		return err
	}
	p := Preempt
	p.TableLimit, p.DepthLimit = 1<<16, 1000
	f.Fuzz(func(t *testing.T, wasm []byte) {
		// The host never hands wazero a module CheckCounts refuses: its
		// decoder would allocate by the counts (testdata/fuzz 42b5b3ee...).
		// The host refuses what CheckReadable refuses before wazero sees it:
		// wazero refuses such a module, valid as it is, and accepts the
		// copy, where the sections Instrument appends follow it, so the
		// differential has nothing to judge there.
		if CheckCounts(wasm) != nil || CheckReadable(wasm) != nil {
			return
		}
		out, err := Instrument(wasm, p)
		if err != nil {
			return
		}
		orig, copied := compile(wasm), compile(out)
		switch {
		case orig == nil && copied != nil:
			t.Fatalf("the original validates, the instrumented copy does not: %v", copied)
		case orig != nil && copied == nil:
			t.Fatalf("the original is invalid (%v), the instrumented copy validates", orig)
		}
	})
}

// TestInstrumentRefusesHostileSeeds: the seeds that would reach the host's
// globals are refused by Instrument itself (ErrInvalid), the start section
// and table.grow ones are instrumented.
func TestInstrumentRefusesHostileSeeds(t *testing.T) {
	p := Preempt
	p.TableLimit = 1 << 16
	for name, wasm := range hostileSeeds() {
		_, err := Instrument(wasm, p)
		wantInvalid := name != "start section" && name != "table.grow"
		if wantInvalid != errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid: %v", name, err, wantInvalid)
		}
	}
}

// TestInstrumentStartSection: the start section is gone from the copy and
// its function is exported as StartExport, so instantiating runs nothing
// and the host calls it, armed, afterwards.
func TestInstrumentStartSection(t *testing.T) {
	// start: global 0 = 7; get() returns global 0.
	wasm := module(
		sec(1, vec([]byte{0x60, 0x00, 0x00}, []byte{0x60, 0x00, 0x01, 0x7f})),
		sec(3, vec([]byte{0}, []byte{1})),
		sec(5, vec([]byte{0x00, 0x01})),
		sec(6, vec([]byte{0x7f, 0x01, 0x41, 0x00, 0x0b})),
		sec(7, vec(append(name("get"), 0x00, 1))),
		sec(8, []byte{0}),
		sec(10, vec(body([]byte{0}, 0x41, 0x07, 0x24, 0x00, 0x0b), body([]byte{0}, 0x23, 0x00, 0x0b))),
	)
	ctx, mod := instantiateInstrumented(t, wasm, Preempt)
	get := mod.ExportedFunction("get")
	if res, err := get.Call(ctx); err != nil || res[0] != 0 {
		t.Fatalf("before the start function get() = %v, %v; want 0 (instantiation must not run it)", res, err)
	}
	start := mod.ExportedFunction(StartExport)
	if start == nil {
		t.Fatalf("no %s export", StartExport)
	}
	if _, err := start.Call(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := get.Call(ctx); err != nil || res[0] != 7 {
		t.Fatalf("after the start function get() = %v, %v; want 7", res, err)
	}
}

// TestTableGrowGuard: a table.grow within the limit works, one past it
// traps with the breach global set, and a table declared above the limit
// is refused with a *LimitError naming limits.table_elements.
func TestTableGrowGuard(t *testing.T) {
	// grow(n) -> i32: table.grow(ref.null, n) on a 1-entry table.
	tableModule := func(min byte) []byte {
		return module(
			sec(1, vec([]byte{0x60, 0x01, 0x7f, 0x01, 0x7f})),
			sec(3, vec([]byte{0})),
			sec(4, vec([]byte{0x70, 0x00, min})),
			sec(5, vec([]byte{0x00, 0x01})),
			sec(7, vec(append(name("grow"), 0x00, 0))),
			sec(10, vec(body([]byte{0}, 0xd0, 0x70, 0x20, 0x00, 0xfc, 0x0f, 0x00, 0x0b))),
		)
	}
	p := Preempt
	p.TableLimit = 100
	ctx, mod := instantiateInstrumented(t, tableModule(1), p)
	grow := mod.ExportedFunction("grow")
	if res, err := grow.Call(ctx, 99); err != nil || res[0] != 1 {
		t.Fatalf("grow(99) to the limit = %v, %v; want the old size 1", res, err)
	}
	breach := mod.ExportedGlobal(BreachExport)
	if _, err := grow.Call(ctx, 1); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("grow(1) past the limit: err = %v, want the unreachable trap", err)
	}
	if breach.Get() != BreachTable {
		t.Fatalf("breach = %d after the trap, want %d", breach.Get(), BreachTable)
	}
	// 2^32-1: the guard adds in 64 bits, so the sum cannot wrap below the limit.
	_, mod2 := instantiateInstrumented(t, tableModule(1), p)
	if _, err := mod2.ExportedFunction("grow").Call(ctx, 0xffffffff); err == nil {
		t.Fatal("grow(2^32-1) did not trap")
	}

	_, err := Instrument(tableModule(101), p)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "table_elements" || le.Got != 101 || !strings.Contains(err.Error(), "limits.table_elements = 100") {
		t.Fatalf("a 101-entry table under a 100 limit: err = %v, want a *LimitError naming limits.table_elements", err)
	}
}

// TestCallDepthBound: calls nest up to DepthLimit and no deeper (the
// breach global says why the trap came), and the depth returns to zero
// after every way out of a function: falling off its end, return, a
// branch to its label, a multi-value result.
func TestCallDepthBound(t *testing.T) {
	// 0: down(n i32) -> i32: if n { down(n-1) drop }; n  (depth n+1)
	// 1: ret(n) -> i32: n; return
	// 2: brk(n) -> i32: n; br 0 (the function's label)
	// 3: two() -> (i32, i32): 1 2
	// 4: all(n) -> i32: down(n) drop; ret(n) drop; brk(n) drop; two() drop drop; n
	wasm := module(
		sec(1, vec([]byte{0x60, 0x01, 0x7f, 0x01, 0x7f}, []byte{0x60, 0x00, 0x02, 0x7f, 0x7f})),
		sec(3, vec([]byte{0}, []byte{0}, []byte{0}, []byte{1}, []byte{0})),
		sec(5, vec([]byte{0x00, 0x01})),
		sec(7, vec(append(name("down"), 0x00, 0), append(name("all"), 0x00, 4))),
		sec(10, vec(
			body([]byte{0}, 0x20, 0x00, 0x04, 0x40, 0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x00, 0x1a, 0x0b, 0x20, 0x00, 0x0b),
			body([]byte{0}, 0x20, 0x00, 0x0f, 0x0b),
			body([]byte{0}, 0x20, 0x00, 0x0c, 0x00, 0x0b),
			body([]byte{0}, 0x41, 0x01, 0x41, 0x02, 0x0b),
			body([]byte{0}, 0x20, 0x00, 0x10, 0x00, 0x1a, 0x20, 0x00, 0x10, 0x01, 0x1a, 0x20, 0x00, 0x10, 0x02, 0x1a,
				0x10, 0x03, 0x1a, 0x1a, 0x20, 0x00, 0x0b),
		)),
	)
	p := Preempt
	p.DepthLimit = 100
	ctx, mod := instantiateInstrumented(t, wasm, p)
	for range 3 {
		if res, err := mod.ExportedFunction("all").Call(ctx, 3); err != nil || res[0] != 3 {
			t.Fatalf("all(3) = %v, %v", res, err)
		}
	}
	// all's calls returned the depth to 0, or 98 more levels would trip it.
	if res, err := mod.ExportedFunction("down").Call(ctx, 99); err != nil || res[0] != 99 {
		t.Fatalf("down(99), 100 deep: %v, %v", res, err)
	}
	if _, err := mod.ExportedFunction("down").Call(ctx, 100); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("down(100), 101 deep: err = %v, want the unreachable trap", err)
	}
	if b := mod.ExportedGlobal(BreachExport).Get(); b != BreachDepth {
		t.Fatalf("breach = %d, want %d", b, BreachDepth)
	}
}

// TestPreemptBudget follows Preempt's budget through calls of loop-free
// functions. "fills" runs memory.fill of 0, 3,000 and 65,536 bytes: its
// entry takes 1 (its 13 instructions are under PreemptUnit) and each fill
// 1 + its length in KiB (1, 3, 65); "long" is 8,192 nops, whose entry
// takes 1 + 8,193/PreemptUnit = 3. A probe that finds the budget spent
// (below 1) enters Go and refills it to PreemptBudget before taking its
// own charge. (Under the old probe every probe took 1 of 64 and every bulk
// operation 16, whatever its length.)
func TestPreemptBudget(t *testing.T) {
	fill := func(n int32) []byte { // memory.fill(0, 0, n)
		return appendS32([]byte{0x41, 0x00, 0x41, 0x00, 0x41}, n)
	}
	var fills []byte
	for _, n := range []int32{0, 3000, 65536} {
		fills = append(append(fills, fill(n)...), 0xfc, 0x0b, 0x00)
	}
	long := append(bytes.Repeat([]byte{0x01}, 8192), 0x0b)
	wasm := module(
		sec(1, vec([]byte{0x60, 0x00, 0x00})),
		sec(3, vec([]byte{0}, []byte{0})),
		sec(5, vec([]byte{0x00, 0x01})),
		sec(7, vec(append(name("fills"), 0x00, 0), append(name("long"), 0x00, 1))),
		sec(10, vec(body([]byte{0}, append(fills, 0x0b)...), body([]byte{0}, long...))),
	)
	ctx, mod := instantiateInstrumented(t, wasm, Preempt)
	budget := mod.ExportedGlobal(PreemptBudgetExport)
	const full, fillsCharge = PreemptBudget, 1 + 1 + 3 + 65
	for i, c := range []struct {
		fn   string
		want int32
	}{
		{"fills", full - fillsCharge},       // 186
		{"fills", full - 2*fillsCharge},     // 116
		{"fills", full - 3*fillsCharge},     // 46
		{"fills", full - 4*fillsCharge},     // -24: overspent by the last fill
		{"fills", full - fillsCharge},       // the entry found it spent: refilled
		{"long", full - fillsCharge - 3},    // 183
		{"fills", full - 2*fillsCharge - 3}, // 113
	} {
		if _, err := mod.ExportedFunction(c.fn).Call(ctx); err != nil {
			t.Fatal(err)
		}
		if got := int32(uint32(budget.Get())); got != c.want {
			t.Fatalf("after call %d (%s) the budget is %d, want %d", i+1, c.fn, got, c.want)
		}
	}

	// A bulk operation never takes the budget below bulkFloor, from where
	// more could wrap it round to a large positive number (no entry probe
	// here, so that the budget set before the call is what the fill sees).
	p := Preempt
	p.FunctionEntry = false
	ctx, mod = instantiateInstrumented(t, wasm, p)
	mb := mod.ExportedGlobal(PreemptBudgetExport).(api.MutableGlobal)
	start := int32(bulkFloor + 10)
	mb.Set(uint64(uint32(start)))
	if _, err := mod.ExportedFunction("fills").Call(ctx); err != nil {
		t.Fatal(err)
	}
	if got := int32(uint32(mb.Get())); got != bulkFloor {
		t.Fatalf("after fills from bulkFloor+10 the budget is %d, want bulkFloor %d", got, bulkFloor)
	}
}

// TestSegmentCosts checks the static cost of each probe: from the entry,
// every instruction outside all loops; from a loop's header, every
// instruction whose innermost loop is it or one around it, including
// those a forward branch reaches after it ends, and none inside a later
// or nested loop (whose header probe must be passed to get there). A cost
// lower than what can run would let a guest run longer than
// PreemptBudget without entering Go.
func TestSegmentCosts(t *testing.T) {
	for _, tt := range []struct {
		name string
		code []byte
		want []uint32 // entry, then each loop in order
	}{
		{"straight", []byte{0x01, 0x01, 0x0b}, []uint32{3}},
		// loop; br 0; end; end
		{"spin", []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b}, []uint32{2, 3}},
		// block
		//   loop A: loop B: end B; nop; end A
		//   loop C: nop; end C
		// end; nop; end
		// A reaches its own 3 (loop B's header counted in A, end B in B)
		// and the 4 outside after it (loop C's header, the block's end,
		// nop, end); B its end, then A's nop and end, then those 4; C
		// its nop and end and the 3 after it.
		{"nested", []byte{0x02, 0x40,
			0x03, 0x40, 0x03, 0x40, 0x0b, 0x01, 0x0b,
			0x03, 0x40, 0x01, 0x0b,
			0x0b, 0x01, 0x0b}, []uint32{6, 7, 7, 5}},
		// loop A: block; i32.const 0; br_if 0; loop B: br 0; end B; end; nop; end A; end
		// The br_if jumps past loop B to the block's end: A's cost counts
		// its 7 (B's header included) and the function's end; B's counts
		// its 2, A's 3 after it and the function's end.
		{"branch past a loop", []byte{0x03, 0x40, 0x02, 0x40, 0x41, 0x00, 0x0d, 0x00,
			0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, 0x01, 0x0b, 0x0b}, []uint32{2, 8, 6}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fn := append([]byte{0}, tt.code...) // no locals
			got, err := segmentCosts(nil, fn)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("costs %v, want %v", got, tt.want)
			}
		})
	}
}

// instantiateInstrumented instruments wasm with p and instantiates the
// copy in a fresh runtime that the test's cleanup closes.
func instantiateInstrumented(t *testing.T, wasm []byte, p Probe) (context.Context, api.Module) {
	t.Helper()
	out, err := Instrument(wasm, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = rt.Close(ctx) })
	mod, err := rt.Instantiate(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, mod
}

// TestSegmentCostsBoundEveryPath checks segmentCosts against a brute
// force on random structured bodies: from the entry and from each loop's
// header, the longest run of instructions that control can take (every
// branch taken or not, every if either way) before it reaches another
// loop's header, branches back to a loop or returns. A cost below it is a
// segment that runs longer than its probe pays for.
func TestSegmentCostsBoundEveryPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 2))
	for n := range 3000 {
		code := randomBody(rng)
		fn := append([]byte{0}, code...)
		costs, err := segmentCosts(nil, fn)
		if err != nil {
			t.Fatalf("body %d %x: %v", n, code, err)
		}
		longest, starts := longestRuns(t, code)
		if len(costs) != len(starts) {
			t.Fatalf("body %d %x: %d costs for %d probes", n, code, len(costs), len(starts))
		}
		for i, at := range starts {
			if got, want := costs[i], longest(at); got < want {
				t.Fatalf("body %d %x: probe %d (at %d) costs %d, but %d instructions can run after it", n, code, i, at, got, want)
			}
		}
	}
}

// randomBody returns a random structured function body (instructions and
// the final end) of nop, i32.const, block, loop, if/else, br, br_if and
// return, with every label in range.
func randomBody(rng *rand.Rand) []byte {
	var b []byte
	var gen func(depth int)
	gen = func(depth int) {
		for range rng.IntN(6) {
			switch k := rng.IntN(10); {
			case k < 2:
				b = append(b, 0x01) // nop
			case k == 2 && depth < 6:
				b = append(b, 0x02, 0x40) // block
				gen(depth + 1)
				b = append(b, 0x0b)
			case k == 3 && depth < 6:
				b = append(b, 0x03, 0x40) // loop
				gen(depth + 1)
				b = append(b, 0x0b)
			case k == 4 && depth < 6:
				b = append(b, 0x41, 0x00, 0x04, 0x40) // i32.const 0; if
				gen(depth + 1)
				if rng.IntN(2) == 0 {
					b = append(b, 0x05) // else
					gen(depth + 1)
				}
				b = append(b, 0x0b)
			case k == 5:
				b = append(b, 0x0c, byte(rng.IntN(depth+1))) // br (depth is the function's label)
			case k == 6:
				b = append(b, 0x41, 0x00, 0x0d, byte(rng.IntN(depth+1))) // br_if
			case k == 7 && rng.IntN(4) == 0:
				b = append(b, 0x0f) // return
			default:
				b = append(b, 0x41, 0x05) // i32.const 5
			}
		}
	}
	gen(0)
	return append(b, 0x0b)
}

// longestRuns decodes code (no local declarations) and returns a function
// giving the most instructions control can run from an instruction index
// without reaching a loop's header (the loop instruction itself counts)
// or branching to a loop, and the index each probe's run starts at: 0 for
// the entry, then the instruction after each loop.
func longestRuns(t *testing.T, code []byte) (func(int) uint32, []int) {
	t.Helper()
	type ins struct {
		op    byte
		label int // br, br_if: the label's depth
	}
	var prog []ins
	r := reader{b: code}
	for r.off < len(code) {
		op := r.instruction()
		if r.err != nil {
			t.Fatal(r.err)
		}
		in := ins{op: op}
		if op == 0x0c || op == 0x0d {
			in.label = int(code[r.off-1]) // randomBody's labels are one byte
		}
		prog = append(prog, in)
	}
	// Match the structure: for each block, loop or if its end (and else).
	end := make([]int, len(prog))
	elseAt := make([]int, len(prog))
	opener := make([]int, len(prog)) // for an else or end: its block's start, or -1
	var open []int
	for i, in := range prog {
		elseAt[i], opener[i] = -1, -1
		switch in.op {
		case 0x02, 0x03, 0x04:
			open = append(open, i)
		case 0x05:
			elseAt[open[len(open)-1]] = i
			opener[i] = open[len(open)-1]
		case 0x0b:
			if len(open) > 0 {
				s := open[len(open)-1]
				open = open[:len(open)-1]
				end[s], opener[i] = i, s
			}
		}
	}
	// enclosing[i]: the open blocks at i, innermost last (for labels).
	enclosing := make([][]int, len(prog))
	open = open[:0]
	for i, in := range prog {
		enclosing[i] = slices.Clone(open)
		switch in.op {
		case 0x02, 0x03, 0x04:
			open = append(open, i)
		case 0x0b:
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
		}
	}
	memo := map[int]uint32{}
	// target is where a branch to label depth l from i continues, or -1
	// when it stops the run (a loop's header, or the function's label:
	// a return).
	target := func(i, l int) int {
		enc := enclosing[i]
		if l >= len(enc) {
			return -1
		}
		s := enc[len(enc)-1-l]
		if prog[s].op == 0x03 {
			return -1
		}
		return end[s] + 1
	}
	var longest func(i int) uint32
	longest = func(i int) uint32 {
		if i >= len(prog) {
			return 0
		}
		if v, ok := memo[i]; ok {
			return v
		}
		var next []int
		switch in := prog[i]; in.op {
		case 0x03: // a loop's header: its probe ends the run
		case 0x0f: // return
		case 0x0c:
			if j := target(i, in.label); j >= 0 {
				next = append(next, j)
			}
		case 0x0d:
			next = append(next, i+1)
			if j := target(i, in.label); j >= 0 {
				next = append(next, j)
			}
		case 0x04: // if: the then arm, or the else arm or past the end
			next = append(next, i+1)
			if e := elseAt[i]; e >= 0 {
				next = append(next, e+1)
			} else {
				next = append(next, end[i]+1)
			}
		case 0x05: // the then arm's end: past the if's end
			next = append(next, end[opener[i]]+1)
		default:
			next = append(next, i+1)
		}
		var best uint32
		for _, j := range next {
			best = max(best, longest(j))
		}
		memo[i] = 1 + best
		return 1 + best
	}
	starts := []int{0}
	for i, in := range prog {
		if in.op == 0x03 {
			starts = append(starts, i+1)
		}
	}
	return longest, starts
}
