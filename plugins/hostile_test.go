package plugins

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/plugins/internal/wasmbin"
)

// A corpus of hostile modules, hand-assembled so each costs milliseconds
// to compile (a Go guest costs ~19 s under -race). Every one speaks the ABI
// well enough to load: it exports memory, volhost_abi_version (1),
// volhost_buffer (address 1024), volhost_configure and
// volhost_decide_release (an empty response). Its decide export behaves
// from the second call of an instance on, so the load's self-test passes
// on the canary and the test's first call is the hostile one.

// Value and function types of hostile modules, by index.
const (
	htVoid   = 0 // () -> ()
	htI32    = 1 // () -> i32
	htI32I32 = 2 // (i32) -> i32
	htI32I64 = 3 // (i32) -> i64
	htFan    = 4 // (i32) -> ()
)

// Function indices: the four ABI exports first, then hmod.funcs.
const (
	hfVersion   = 0
	hfBuffer    = 1
	hfConfigure = 2
	hfDecide    = 3
	hfExtra     = 4 // the first of hmod.funcs
)

// hfunc is an extra function of a hostile module.
type hfunc struct {
	typ    byte
	code   []byte // instructions, without the final end
	export string // "" for none
}

// hmod describes a hostile module.
type hmod struct {
	memMin    uint32
	tableMin  uint32 // 0: no table
	elems     []byte // function indices placed in the table at 0
	configure []byte // runs in volhost_configure before it answers
	decide    []byte // runs in volhost_decide_release from the second call on
	funcs     []hfunc
	start     int // index into funcs of the start function, -1 for none
}

func newHmod() hmod { return hmod{memMin: 1, start: -1} }

func hvec(items ...[]byte) []byte {
	out := uleb(nil, uint32(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func hsec(id byte, data []byte) []byte { return append(uleb([]byte{id}, uint32(len(data))), data...) }

func hname(s string) []byte { return append(uleb(nil, uint32(len(s))), s...) }

func hbody(code []byte) []byte {
	b := append([]byte{0x00}, code...) // no locals
	b = append(b, 0x0b)
	return append(uleb(nil, uint32(len(b))), b...)
}

func uleb(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func sleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// i32c is i32.const v.
func i32c(v int64) []byte { return sleb([]byte{0x41}, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// build assembles the module.
func (h hmod) build() []byte {
	types := hsec(1, hvec(
		[]byte{0x60, 0x00, 0x00},
		[]byte{0x60, 0x00, 0x01, 0x7f},
		[]byte{0x60, 0x01, 0x7f, 0x01, 0x7f},
		[]byte{0x60, 0x01, 0x7f, 0x01, 0x7e},
		[]byte{0x60, 0x01, 0x7f, 0x00},
	))
	fnTypes := [][]byte{{htI32}, {htI32I32}, {htI32I64}, {htI32I64}}
	for _, f := range h.funcs {
		fnTypes = append(fnTypes, []byte{f.typ})
	}
	out := cat([]byte("\x00asm\x01\x00\x00\x00"), types, hsec(3, hvec(fnTypes...)))
	if h.tableMin > 0 {
		out = append(out, hsec(4, hvec(uleb([]byte{0x70, 0x00}, h.tableMin)))...)
	}
	out = append(out, hsec(5, hvec(uleb([]byte{0x00}, h.memMin)))...)
	out = append(out, hsec(6, hvec([]byte{0x7f, 0x01, 0x41, 0x00, 0x0b}))...) // global 0: calls
	exports := [][]byte{
		append(hname("memory"), 0x02, 0x00),
		append(hname("volhost_abi_version"), 0x00, hfVersion),
		append(hname("volhost_buffer"), 0x00, hfBuffer),
		append(hname("volhost_configure"), 0x00, hfConfigure),
		append(hname("volhost_decide_release"), 0x00, hfDecide),
	}
	for i, f := range h.funcs {
		if f.export != "" {
			exports = append(exports, uleb(append(hname(f.export), 0x00), uint32(hfExtra+i)))
		}
	}
	out = append(out, hsec(7, hvec(exports...))...)
	if h.start >= 0 {
		out = append(out, hsec(8, uleb(nil, uint32(hfExtra+h.start)))...)
	}
	if len(h.elems) > 0 {
		seg := cat([]byte{0x00, 0x41, 0x00, 0x0b}, uleb(nil, uint32(len(h.elems))), h.elems)
		out = append(out, hsec(9, hvec(seg))...)
	}
	bodies := [][]byte{
		hbody(i32c(1)),
		hbody(i32c(1024)),
		hbody(cat(h.configure, []byte{0x42, 0x00})),
		// calls++; if calls > 1 { decide }; i64.const 0
		hbody(cat([]byte{0x23, 0x00, 0x41, 0x01, 0x6a, 0x24, 0x00, 0x23, 0x00, 0x41, 0x01, 0x4b, 0x04, 0x40},
			h.decide, []byte{0x0b, 0x42, 0x00})),
	}
	for _, f := range h.funcs {
		bodies = append(bodies, hbody(f.code))
	}
	return append(out, hsec(10, hvec(bodies...))...)
}

// Hostile code.
var (
	spinForever = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b} // loop; br 0; end
	// fanCode is the body of fan(n) at function index self: if n { fan(n-1); fan(n-1) }:
	// 2^n calls and no loop.
	fanCode = func(self uint32) []byte {
		call := uleb([]byte{0x10}, self)
		return cat([]byte{0x20, 0x00, 0x04, 0x40},
			[]byte{0x20, 0x00, 0x41, 0x01, 0x6b}, call,
			[]byte{0x20, 0x00, 0x41, 0x01, 0x6b}, call, []byte{0x0b})
	}
	// fanIndirect is fan through call_indirect on table slot 0.
	fanIndirect = cat([]byte{0x20, 0x00, 0x04, 0x40},
		[]byte{0x20, 0x00, 0x41, 0x01, 0x6b, 0x41, 0x00, 0x11, htFan, 0x00},
		[]byte{0x20, 0x00, 0x41, 0x01, 0x6b, 0x41, 0x00, 0x11, htFan, 0x00}, []byte{0x0b})
)

// hostileCase is one module of the corpus and what must happen to it.
type hostileCase struct {
	name   string
	mod    hmod
	limits string // the manifest's limits block body
	// refused: a substring of the refusal; else the decide call's fault.
	refused string
	fault   FaultKind
	message string        // a substring of the fault's error
	within  time.Duration // the hostile call must end within this
}

func hostileCorpus() []hostileCase {
	withFuncs := func(h hmod, decide []byte, fs ...hfunc) hmod { h.decide, h.funcs = decide, fs; return h }
	startRecursion := withFuncs(newHmod(), cat(i32c(40), []byte{0x10, hfExtra + 1}),
		hfunc{typ: htVoid}, // the (empty) start function
		hfunc{typ: htFan, code: fanCode(hfExtra + 1)})
	startRecursion.start = 0
	startSpin := withFuncs(newHmod(), nil, hfunc{typ: htVoid, code: spinForever})
	startSpin.start = 0
	indirect := withFuncs(newHmod(), cat(i32c(40), i32c(0), []byte{0x11, htFan, 0x00}),
		hfunc{typ: htFan, code: fanIndirect})
	indirect.tableMin, indirect.elems = 1, []byte{hfExtra}
	tableGrow := newHmod()
	tableGrow.tableMin = 1
	tableGrow.decide = cat([]byte{0xd0, 0x70}, i32c(1<<26), []byte{0xfc, 0x0f, 0x00, 0x1a})
	memGrow := newHmod()
	// memory.grow 1 (to the 2-page cap), then memory.grow 1 again: -1, trap.
	memGrow.decide = cat(i32c(1), []byte{0x40, 0x00, 0x1a}, i32c(1), []byte{0x40, 0x00},
		i32c(-1), []byte{0x46, 0x04, 0x40, 0x00, 0x0b})
	bulk := newHmod()
	bulk.memMin = 1024 // 64 MiB: each fill and copy takes milliseconds
	bulk.decide = cat([]byte{0x03, 0x40},
		i32c(0), i32c(0), i32c(64<<20), []byte{0xfc, 0x0b, 0x00},
		i32c(0), i32c(32<<20), i32c(32<<20), []byte{0xfc, 0x0a, 0x00, 0x00},
		[]byte{0x0c, 0x00, 0x0b})
	hugeTable := newHmod()
	hugeTable.tableMin = 1 << 20
	hugeMem := newHmod()
	hugeMem.memMin = 65536
	refill := newHmod()
	// global 2 is, in the instrumented copy, the host's budget.
	refill.decide = cat([]byte{0x03, 0x40}, i32c(64), []byte{0x24, 0x02, 0x0c, 0x00, 0x0b})
	initSpin := withFuncs(newHmod(), nil, hfunc{typ: htVoid, code: spinForever, export: "_initialize"})
	configureSpin := newHmod()
	configureSpin.configure = spinForever
	const timeoutLimits = `call_timeout = "300ms"` + "\n  pool_size = 1"
	// A set-up deadline of max(InitTimeout = 1s, 10 call timeouts) = 1s.
	const initLimits = `call_timeout = "50ms"` + "\n  pool_size = 1"
	return []hostileCase{
		{name: "start section and loop-free recursion", mod: startRecursion, limits: timeoutLimits,
			fault: FaultTimeout, message: "limits.call_timeout = 300ms", within: 20 * time.Second},
		{name: "start section spins", mod: startSpin, limits: initLimits,
			refused: "timeout: start function: ran past the 1s deadline of an instance's set-up"},
		{name: "call_indirect recursion", mod: indirect, limits: timeoutLimits,
			fault: FaultTimeout, message: "limits.call_timeout", within: 20 * time.Second},
		{name: "stack overflow", mod: withFuncs(newHmod(), []byte{0x10, hfExtra}, hfunc{typ: htVoid, code: []byte{0x10, hfExtra}}),
			limits: `call_timeout = "10s"` + "\n  pool_size = 1", fault: FaultTrap, message: "calls nested past the host's limit of 10000", within: 5 * time.Second},
		{name: "table.grow past the limit", mod: tableGrow, limits: "table_elements = 1000\n  pool_size = 1",
			fault: FaultTableLimit, message: "limits.table_elements = 1000", within: 20 * time.Second},
		{name: "memory.grow past the cap", mod: memGrow, limits: "memory_pages = 2\n  pool_size = 1",
			fault: FaultOOM, message: "memory at 2 of limits.memory_pages = 2", within: 20 * time.Second},
		{name: "huge memory.fill and memory.copy", mod: bulk, limits: "memory_pages = 1024\n  " + timeoutLimits,
			fault: FaultTimeout, message: "limits.call_timeout", within: 20 * time.Second},
		{name: "huge initial table", mod: hugeTable, limits: "table_elements = 1000",
			refused: "table 0 initial size is 1048576, over limits.table_elements = 1000"},
		{name: "huge initial memory", mod: hugeMem, limits: "memory_pages = 256",
			refused: "over limit of 256 pages"},
		{name: "budget refill", mod: refill, limits: timeoutLimits,
			refused: "is not a valid module"},
		{name: "_initialize spins", mod: initSpin, limits: initLimits,
			refused: "timeout: _initialize: ran past the 1s deadline"},
		{name: "configure spins", mod: configureSpin, limits: initLimits,
			refused: "configure: module h 1.0.0: timeout: volhost_configure: ran past the 1s deadline"},
	}
}

// TestHostileModules loads each module of the corpus beside a healthy one
// (the AssemblyScript default policy) and checks that its limit holds, that
// the healthy module keeps answering and a garbage collection completes
// while the hostile call runs, and that Close returns promptly.
func TestHostileModules(t *testing.T) {
	healthy := exampleWasm(t, "as-default-policy")
	for _, tc := range hostileCorpus() {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(dir string) {
				writeModule(t, dir, "h", tc.mod.build(), manifest("release-policy", "limits {\n  "+tc.limits+"\n}"))
				writeModule(t, dir, "healthy", healthy, manifest("release-policy", policyManifest))
			}, func(o *Options) { o.InitTimeout = time.Second })
			st, _ := e.m.StatusOf("h")
			if tc.refused != "" {
				if st.State != StateRefused || !strings.Contains(st.Refusal, tc.refused) {
					t.Fatalf("status %s, refusal %q; want refused with %q", st.State, st.Refusal, tc.refused)
				}
				t.Logf("refused: %s", st.Refusal)
				checkHealthy(t, e.m)
				return
			}
			if st.State != StateServing {
				t.Fatalf("status %s (%s), want serving", st.State, st.Refusal)
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := e.m.DecideRelease(context.Background(), "h", volumeRequest(1))
				done <- err
			}()
			// While the hostile call runs: the healthy module answers and
			// a GC's stop-the-world completes (the hostile guest must
			// enter Go). At least one round, then until the call ends.
			var err error
			for finished := false; !finished; {
				checkHealthy(t, e.m)
				runtime.GC()
				select {
				case err = <-done:
					finished = true
				default:
					if time.Since(start) > tc.within {
						t.Fatalf("the hostile call ran past %v", tc.within)
					}
				}
			}
			elapsed := time.Since(start)
			fe := assertFault(t, err, tc.fault)
			if !strings.Contains(fe.Error(), tc.message) {
				t.Fatalf("fault %q does not name %q", fe.Error(), tc.message)
			}
			t.Logf("%s after %v: %v", fe.Kind, elapsed, fe)
			// The instance was discarded; a fresh one serves (its first
			// call is a good one by construction).
			if _, err := e.m.DecideRelease(context.Background(), "h", volumeRequest(1)); err != nil {
				t.Fatalf("the call after the fault: %v", err)
			}
			// One more hostile call in flight: Close waits for it, which
			// must take no longer than its bound.
			go func() {
				_, err := e.m.DecideRelease(context.Background(), "h", volumeRequest(1))
				done <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
			if err := e.m.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			<-done
		})
	}
}

// checkHealthy fails the test unless the healthy module answers.
func checkHealthy(t *testing.T, m *Manager) {
	t.Helper()
	resp, err := m.DecideRelease(context.Background(), "healthy", volumeRequest(3))
	if err != nil || len(resp.Decisions) != 3 {
		t.Fatalf("the healthy module: %v, %v", resp, err)
	}
}

// TestCompileBomb: a module of very many (empty) functions is validated,
// instrumented and compiled (its load time is logged, not asserted: the
// test timeout bounds a hang), and a module file over max_module_size is
// refused before it is read.
func TestCompileBomb(t *testing.T) {
	const n = 100_000
	h := newHmod()
	for range n {
		h.funcs = append(h.funcs, hfunc{typ: htVoid})
	}
	bomb := h.build()
	t.Logf("%d functions, %d bytes", n, len(bomb))
	start := time.Now()
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "bomb", bomb, manifest("release-policy", ""))
	}, func(o *Options) { o.Maxima.ModuleSize = int64(len(bomb)) })
	elapsed := time.Since(start)
	t.Logf("loaded in %v", elapsed)
	if st, _ := e.m.StatusOf("bomb"); st.State != StateServing {
		t.Fatalf("bomb: %s %s", st.State, st.Refusal)
	}
	// One byte over the cap: refused, naming the setting.
	writeModule(t, e.dir, "big", append(bomb, 0), manifest("release-policy", ""))
	if _, err := e.m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, _ := e.m.StatusOf("big")
	want := fmt.Sprintf("big.wasm is %d bytes, over module_limits.max_module_size (%d bytes)", len(bomb)+1, len(bomb))
	if st.State != StateRefused || st.Refusal != want {
		t.Fatalf("big: %s %q, want refused %q", st.State, st.Refusal, want)
	}
}

// TestCountBombRefused: a 20-byte module whose element count makes
// wazero's decoder ask for 100 GiB (a fatal out-of-memory: the agent died
// before FuzzInstrument found it) is refused with the reason before
// anything decodes it, and the healthy module keeps serving.
func TestCountBombRefused(t *testing.T) {
	bomb := []byte("\x00asm\x01\x00\x00\x00\t\x04\xc7\xc7\xc7\xc7\x05\x040000")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "bomb", bomb, manifest("release-policy", ""))
		writeModule(t, dir, "healthy", exampleWasm(t, "as-default-policy"), manifest("release-policy", policyManifest))
	}, nil)
	st, _ := e.m.StatusOf("bomb")
	if st.State != StateRefused || !strings.Contains(st.Refusal, "bomb.wasm is not a valid module") || !strings.Contains(st.Refusal, "element section") {
		t.Fatalf("bomb: %s %q, want refused naming the element section", st.State, st.Refusal)
	}
	checkHealthy(t, e.m)
}

// TestEmptyTrailingCustomSection: a valid module whose last section is a
// custom section with nothing after its name (wazero v1.12.0 refuses it
// with a bare "EOF", naming neither the section nor a fix) is refused at
// load with ErrRuntimeCannotRead's reason naming the section and what to
// change, and the healthy module keeps serving; the same section with
// content after its name loads and serves. Without the check in
// generation.compile the refusal would be wazero's bare EOF.
func TestEmptyTrailingCustomSection(t *testing.T) {
	base := newHmod().build()
	empty := append(append([]byte{}, base...), hsec(0, hname("note"))...)
	withContent := append(append([]byte{}, base...), hsec(0, append(hname("note"), 'x'))...)
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "empty", empty, manifest("release-policy", ""))
		writeModule(t, dir, "content", withContent, manifest("release-policy", ""))
		writeModule(t, dir, "healthy", exampleWasm(t, "as-default-policy"), manifest("release-policy", policyManifest))
	}, nil)
	st, _ := e.m.StatusOf("empty")
	for _, want := range []string{"empty.wasm:", wasmbin.ErrRuntimeCannotRead.Error(), `custom section "note"`, "drop the section"} {
		if st.State != StateRefused || !strings.Contains(st.Refusal, want) {
			t.Fatalf("empty: %s %q, want refused naming %q", st.State, st.Refusal, want)
		}
	}
	if st, _ := e.m.StatusOf("content"); st.State != StateServing {
		t.Fatalf("content: %s %q, want serving", st.State, st.Refusal)
	}
	checkHealthy(t, e.m)
}
