package wasmbin

import (
	"fmt"
	"slices"
	"strings"
)

// Probe is code Instrument inserts at every loop header, and optionally at
// every function entry, together with the new mutable globals it uses.
type Probe struct {
	// Globals are appended to the module's, in order.
	Globals []Global
	// Code appends to b the instructions to insert, given the index of the
	// first new global (the others follow it) and the probe's cost: a
	// bound on the instructions the function can run from this probe until
	// it passes another one or returns (see segmentCosts; calls made in
	// between pass their callee's own probes). The instructions must leave
	// the operand stack as they found it: a loop's parameters are on it at
	// the header.
	Code func(b []byte, first, cost uint32) []byte
	// FunctionEntry inserts Code at the start of every function body too.
	FunctionEntry bool
	// BulkCode, if set, appends to b the code inserted before every bulk
	// memory or table operation (memory.copy, memory.fill, memory.init,
	// table.init, table.copy, table.fill), given the first new global's
	// index and the operation's 0xfc sub-opcode. It sees the operand stack
	// with the operation's length (an i32) on top and must leave it as it
	// found it.
	BulkCode func(b []byte, first, sub uint32) []byte
	// UsesMemory: Code uses memory 0, so a module without one is
	// ErrUnsupported.
	UsesMemory bool
	// TableGrowCode, if set, is inserted before every table.grow, given the
	// first new global's index, the table's index and TableLimit. It sees
	// the operand stack [init ref, delta] and must leave it so.
	TableGrowCode func(first, table, limit uint32) []byte
	// TableLimit, with TableGrowCode, bounds every table's size: a module
	// declaring a table whose initial size is above it is refused with a
	// *LimitError, and TableGrowCode stops a grow past it at run time.
	TableLimit uint32
	// DepthCode, if set with DepthLimit, bounds the call depth: enter is
	// inserted at every function entry (after Code), exit before every
	// return and tail call and after the body, which Instrument wraps in a
	// block so that every branch out of it passes exit too. Both are given
	// the first new global's index and DepthLimit.
	DepthCode func(first, limit uint32) (enter, exit []byte)
	// DepthLimit is the deepest call nesting allowed (with DepthCode).
	DepthLimit uint32
}

// BreachDepth is the value of BreachExport after a call deeper than
// Probe.DepthLimit.
const BreachDepth = 2

// StartExport is the name Instrument exports a module's start function
// under after removing its start section, so the host runs it, under the
// same preemption as any call, right after instantiation (the start
// section itself would run inside instantiation, where the host cannot
// reach the flag yet).
const StartExport = "volhost.start"

// ReservedPrefix begins every export name Instrument adds; a module that
// exports a name with this prefix itself is refused.
const ReservedPrefix = "volhost."

// BreachExport is the export name of Preempt's breach global: the guest
// sets it to BreachTable just before it traps on a table.grow past the
// limit, so the host can tell that trap from any other.
const BreachExport = "volhost.breach"

// BreachTable is the value of BreachExport after a table limit breach.
const BreachTable = 1

// LimitError is a module over one of the host's limits, found before it
// runs (a table's initial size).
type LimitError struct {
	Limit string // the limit's name, e.g. "table_elements"
	Max   uint64 // the limit
	Got   uint64 // what the module declares
	What  string // where, e.g. "table 0 initial size"
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s is %d, over limits.%s = %d", e.What, e.Got, e.Limit, e.Max)
}

// Global is a mutable global a Probe adds.
type Global struct {
	// Type is 0x7f (i32) or 0x7e (i64).
	Type byte
	// Init is the initial value.
	Init int32
	// Export, if set, is the name the global is exported under so the host
	// can read or set it; a module that already exports it is refused.
	Export string
}

// PreemptExport is the export name of Preempt's stop flag.
const PreemptExport = "volhost.preempt"

// PreemptBudget is the budget a Preempt-instrumented guest spends between
// two entries into the Go runtime. Every probe takes its charge from it,
// 1 + cost/PreemptUnit where cost is a static bound on the instructions
// its function can run before it passes another probe (segmentCosts); the
// probe that finds it spent enters Go, checks the flag and refills it. So
// at most PreemptBudget probes pass between two entries, and at most about
// 2 x PreemptBudget x PreemptUnit instructions run (2 million) plus two
// function bodies: a bound that a count of probes alone did not give (a
// long straight-line body ran up to 64 times over under the old probe). It
// was 64 probes; at 256, with bulk operations charged by length
// (bulkCharge), the probes' overhead on an 8-claim call fell
// (BenchmarkProbeVariants), for a stop-the-world that waits up to 256 probes instead of
// 64 (a few microseconds in the example guests) for a running call
// (RATIONALE "Why do probes charge by static cost?").
const PreemptBudget = 256

// PreemptUnit is how many instructions of static cost make one more unit
// of a probe's charge. Below it a probe takes 1, so typical code, whose
// probes guard a few dozen instructions each, pays no more than it did
// under a count of probes; a Go function's loop header guards its whole
// body (Go's wasm jumps through one dispatch loop), about 1,900
// instructions on average in the example policy, so a smaller unit would
// make a Go guest enter Go more often than before.
const PreemptUnit = 4096

// PreemptBulkShift and PreemptBulkTableShift: a bulk memory operation
// of n bytes takes 1 + n>>PreemptBulkShift from the budget, a bulk table
// operation of n entries 1 + n>>PreemptBulkTableShift (bulkCharge): about
// a probe's worth per KiB moved.
const (
	PreemptBulkShift      = 10
	PreemptBulkTableShift = 7
)

// PreemptBudgetExport is the export name of Preempt's budget, for tests
// and diagnostics; the host never writes it.
const PreemptBudgetExport = "volhost.preempt_budget"

// Preempt is the probe that makes a running call stoppable without
// wazero's close-on-context-done, which calls into Go at every loop header
// (RATIONALE "Call timeouts: the guest counts, the host flags"). At every
// function entry and loop header the guest tests a budget of
// PreemptBudget and takes the probe's charge from it; when the test finds
// it spent the guest enters Go with `memory.grow 0` and then checks an i32
// flag, exported as PreemptExport, trapping (`unreachable`) once the host
// has set it non-zero.
//
// A bulk memory or table operation takes a charge by its length
// (bulkCharge).
//
// Both halves matter. Compiled wasm is not preemptible by the Go
// scheduler: a guest that never entered Go would hold its thread through a
// garbage collector's stop-the-world, and with it every goroutine,
// including the timer that was to stop it. And every unbounded execution
// passes a probe: a loop's back edge enters its header, and recursion, tail
// calls included, enters a function.
var Preempt = NewPreempt(PreemptBudget, PreemptUnit)

// NewPreempt is Preempt with another budget and unit (a probe takes
// 1 + cost/unit, at most budget), for benchmarks that weigh them against
// the cost of entering Go; the host uses Preempt.
func NewPreempt(budget, unit int32) Probe {
	return Probe{
		Globals: []Global{
			{Type: 0x7f, Export: PreemptExport},                     // the flag, set by the host
			{Type: 0x7f, Init: budget, Export: PreemptBudgetExport}, // the budget, the guest's own
			{Type: 0x7f, Export: BreachExport},                      // set before a limit trap
			{Type: 0x7f},                                            // scratch for the table.grow guard
			{Type: 0x7f},                                            // the call depth
		},
		FunctionEntry: true,
		UsesMemory:    true,
		Code: func(b []byte, flag, cost uint32) []byte {
			return preemptCode(b, flag, int32(min(1+cost/uint32(unit), uint32(budget))), budget)
		},
		BulkCode:      bulkCharge,
		TableGrowCode: tableGrowGuard,
		DepthCode:     depthCode,
	}
}

// preemptCode tests the budget (the second global) and, if it is spent
// (below 1), enters Go, traps if the flag (the first global) is set and
// refills it; then it takes charge from it.
//
//	global.get budget; i32.const 1; i32.lt_s
//	if; i32.const 0; memory.grow 0; drop
//	    global.get flag; if; unreachable; end
//	    i32.const refill; global.set budget; end
//	global.get budget; i32.const charge; i32.sub; global.set budget
//
// Testing before taking, not after, is what the old probe did, and it
// measured cheaper under wazero's compiler (a variant of
// BenchmarkProbeVariants run once: taking first made an AssemblyScript
// call slower, presumably because the taken value is then live
// across the slow path's call).
func preemptCode(b []byte, flag uint32, charge, refill int32) []byte {
	budget := flag + 1
	b = appendU32(append(b, 0x23), budget)               // global.get budget
	b = append(b, 0x41, 0x01, 0x48, 0x04, 0x40)          // i32.const 1; i32.lt_s; if (spent)
	b = append(b, 0x41, 0x00, 0x40, 0x00, 0x1a)          // memory.grow 0 pages (enters Go); drop
	b = appendU32(append(b, 0x23), flag)                 // global.get flag
	b = append(b, 0x04, 0x40, 0x00, 0x0b)                // if: unreachable; end
	b = append(appendS32(append(b, 0x41), refill), 0x24) // i32.const refill; global.set budget
	b = append(appendU32(b, budget), 0x0b)               // end
	b = appendU32(append(b, 0x23), budget)               // global.get budget
	b = append(appendS32(append(b, 0x41), charge), 0x6b) // i32.const charge; i32.sub
	return appendU32(append(b, 0x24), budget)            // global.set budget
}

// bulkCharge takes from the budget what a bulk operation costs by its
// length, read from the operand stack (kept aside in the scratch global,
// the fourth): 1 and one more per 1<<PreemptBulkShift bytes of memory or
// 1<<PreemptBulkTableShift table entries. A bulk operation can take
// milliseconds (a memory.fill of the whole memory), so the next probe
// after a large one enters Go, while the small copies an AssemblyScript
// or Go guest makes all the time cost what a probe does. (Under the old
// probe every bulk operation took a quarter of the budget, and the Go entries
// that caused were most of what the probes cost an AssemblyScript call.)
//
// The budget never goes below bulkFloor: straight-line code of enough
// large operations would otherwise wrap it round to a large positive
// number, and the probes after it would not enter Go for as long.
//
//	global.set scratch                          ;; the length aside
//	global.get budget; global.get scratch; i32.const shift; i32.shr_u
//	i32.sub; i32.const 1; i32.sub; global.set budget
//	global.get budget; i32.const floor; global.get budget; i32.const floor
//	i32.gt_s; select; global.set budget         ;; max(budget, floor)
//	global.get scratch                          ;; the length back
func bulkCharge(b []byte, flag, sub uint32) []byte {
	budget, scratch := flag+1, flag+3
	shift := byte(PreemptBulkShift)
	if sub == 12 || sub == 14 || sub == 17 { // table.init, table.copy, table.fill
		shift = PreemptBulkTableShift
	}
	b = appendU32(append(b, 0x24), scratch)
	b = appendU32(append(b, 0x23), budget)
	b = appendU32(append(b, 0x23), scratch)
	b = append(b, 0x41, shift, 0x76, 0x6b, 0x41, 0x01, 0x6b) // i32.const shift; i32.shr_u; i32.sub; i32.const 1; i32.sub
	b = appendU32(append(b, 0x24), budget)
	b = appendU32(append(b, 0x23), budget)
	b = appendS32(append(b, 0x41), bulkFloor)
	b = appendU32(append(b, 0x23), budget)
	b = appendS32(append(b, 0x41), bulkFloor)
	b = append(b, 0x4a, 0x1b) // i32.gt_s; select
	b = appendU32(append(b, 0x24), budget)
	return appendU32(append(b, 0x23), scratch)
}

// bulkFloor is the lowest budget bulkCharge leaves: one operation takes
// at most 2^25+1 (a table operation of 2^32 entries), so it cannot wrap
// from there.
const bulkFloor = -1 << 30

// depthCode counts the call depth in the fifth global and traps (after
// setting the breach global to BreachDepth) past limit. wazero's own bound
// is a 400 MB call stack, allocated on the Go heap as a recursion grows.
//
//	enter: global.get d; i32.const 1; i32.add; global.set d
//	       global.get d; i32.const limit; i32.gt_u
//	       if; i32.const 2; global.set breach; unreachable; end
//	exit:  global.get d; i32.const 1; i32.sub; global.set d
func depthCode(flag, limit uint32) (enter, exit []byte) {
	breach, depth := flag+2, flag+4
	step := func(op byte) []byte {
		b := appendU32([]byte{0x23}, depth)
		b = append(b, 0x41, 0x01, op)
		return appendU32(append(b, 0x24), depth)
	}
	enter = step(0x6a)
	enter = appendU32(append(enter, 0x23), depth)
	enter = appendS64(append(enter, 0x41), int64(int32(limit)))
	enter = append(enter, 0x4b, 0x04, 0x40) // i32.gt_u; if
	enter = appendS32(append(enter, 0x41), BreachDepth)
	enter = appendU32(append(enter, 0x24), breach)
	enter = append(enter, 0x00, 0x0b)
	return enter, step(0x6b)
}

// tableGrowGuard traps (unreachable, after setting the breach global) when
// a table.grow would take the table past limit. wazero itself lets a table
// without a declared maximum grow to 2^32 entries of 8 bytes, allocated on
// the Go heap, where running out of memory kills the whole process.
//
//	global.set scratch          ;; [ref]         (delta aside)
//	table.size t; i64.extend_i32_u
//	global.get scratch; i64.extend_i32_u; i64.add
//	i64.const limit; i64.gt_u   ;; [ref, size+delta > limit]
//	if; i32.const 1; global.set breach; unreachable; end
//	global.get scratch          ;; [ref, delta]
func tableGrowGuard(flag, table, limit uint32) []byte {
	breach, scratch := flag+2, flag+3
	b := appendU32([]byte{0x24}, scratch)
	b = appendU32(append(b, 0xfc, 0x10), table) // table.size
	b = append(b, 0xad)                         // i64.extend_i32_u
	b = appendU32(append(b, 0x23), scratch)
	b = append(b, 0xad, 0x7c) // i64.extend_i32_u; i64.add
	b = appendS64(append(b, 0x42), int64(limit))
	b = append(b, 0x56, 0x04, 0x40) // i64.gt_u; if
	b = appendS32(append(b, 0x41), BreachTable)
	b = appendU32(append(b, 0x24), breach)
	b = append(b, 0x00, 0x0b) // unreachable; end
	return appendU32(append(b, 0x23), scratch)
}

// Instrument returns a copy of wasm with p inserted. Function, type and
// existing global indices are unchanged: the globals are appended after the
// module's own. A start section is removed and its function exported as
// StartExport instead, for the host to call once instantiation is done.
// It returns ErrFormat for bytes it cannot parse, ErrUnsupported (wrapped,
// naming the opcode) for an instruction it does not decode and a
// *LimitError for a table over p.TableLimit; wasm itself is never
// modified.
//
// Instrument does not validate the module: the caller must have compiled
// the original first. Only that makes the appended globals unreachable
// from the guest's own code (an index past the module's globals is invalid
// in the original and would name the host's budget in the copy).
func Instrument(wasm []byte, p Probe) ([]byte, error) {
	secs, err := sections(wasm)
	if err != nil {
		return nil, err
	}
	if err := checkOrder(secs); err != nil {
		return nil, err
	}
	info, err := scan(secs, p)
	if err != nil {
		return nil, err
	}
	first := info.globals
	rw := &rewrite{
		first:   first,
		types:   uint32(len(info.results)),
		funcs:   len(info.funcTypes) - info.imported,
		code:    func(b []byte, cost uint32) []byte { return p.Code(b, first, cost) },
		atEntry: p.FunctionEntry,
	}
	if p.BulkCode != nil {
		rw.bulk = func(b []byte, sub uint32) []byte { return p.BulkCode(b, first, sub) }
	}
	if p.TableGrowCode != nil && p.TableLimit > 0 {
		rw.grow = func(table uint32) []byte { return p.TableGrowCode(first, table, p.TableLimit) }
	}
	if p.DepthCode != nil && p.DepthLimit > 0 {
		rw.depth = planDepth(&info)
		rw.depth.enter, rw.depth.exit = p.DepthCode(first, p.DepthLimit)
	}
	var newGlobals, newExports [][]byte
	for i, g := range p.Globals {
		entry := []byte{g.Type, 0x01} // mutable
		switch g.Type {
		case 0x7f:
			entry = append(appendS32(append(entry, 0x41), g.Init), 0x0b) // i32.const; end
		case 0x7e:
			entry = append(appendS32(append(entry, 0x42), g.Init), 0x0b) // i64.const; end
		default:
			return nil, fmt.Errorf("probe global type %#x: only i32 and i64", g.Type)
		}
		newGlobals = append(newGlobals, entry)
		if g.Export != "" {
			newExports = append(newExports, exportEntry(g.Export, 0x03, first+uint32(i)))
		}
	}
	if info.hasStart {
		newExports = append(newExports, exportEntry(StartExport, 0x00, info.start))
	}

	secs = ensureSection(secs, secGlobal)
	secs = ensureSection(secs, secExport)
	out := append([]byte(nil), header...)
	for _, s := range secs {
		data := s.data
		switch s.id {
		case secType:
			if rw.depth != nil {
				data, err = appendEntries(data, rw.depth.newTypes)
			}
		case secStart:
			continue // exported as StartExport instead
		case secGlobal:
			data, err = appendEntries(data, newGlobals)
		case secExport:
			data, err = appendEntries(data, newExports)
		case secCode:
			data, err = instrumentCode(data, rw)
		}
		if err != nil {
			return nil, fmt.Errorf("%s section: %w", sectionNames[s.id], err)
		}
		out = append(appendU32(append(out, s.id), uint32(len(data))), data...)
	}
	return out, nil
}

func exportEntry(name string, kind byte, index uint32) []byte {
	exp := append(appendU32(nil, uint32(len(name))), name...)
	return appendU32(append(exp, kind), index)
}

// sectionNames name the sections in errors.
var sectionNames = map[byte]string{
	secCustom: "custom", secType: "type", secImport: "import", secFunction: "function",
	secTable: "table", secMemory: "memory", secGlobal: "global", secExport: "export",
	secStart: "start", 9: "element", secCode: "code", 11: "data", secDataCount: "data count",
	secTag: "tag",
}

// checkOrder refuses a section of an unknown id, or a known one repeated
// or out of the spec's order. Instrument drops the start section and
// inserts global and export sections where the order puts them: a second
// or misplaced start section, invalid in the original, would be gone from
// the copy.
func checkOrder(secs []section) error {
	last, lastID := 0, byte(0)
	for _, s := range secs {
		if s.id == secCustom {
			continue
		}
		at, ok := sectionOrder[s.id]
		switch {
		case !ok:
			return fmt.Errorf("%w: section %d: no section has that id", ErrInvalid, s.id)
		case at == last:
			return fmt.Errorf("%w: the %s section is repeated", ErrInvalid, sectionNames[s.id])
		case at < last:
			return fmt.Errorf("%w: the %s section comes after the %s section, out of order", ErrInvalid, sectionNames[s.id], sectionNames[lastID])
		}
		last, lastID = at, s.id
	}
	return nil
}

// moduleInfo is what Instrument needs to know before it rewrites code.
type moduleInfo struct {
	globals   uint32 // imported and own globals: the first new global's index
	hasStart  bool
	start     uint32   // the start function's index
	results   [][]byte // per type: its results (count, then value types)
	void      []bool   // per type: no parameters and no results
	funcTypes []uint32 // per function, imported ones first: its type index
	imported  int      // imported functions
}

// entries reads a vector section's count and calls entry for each entry;
// the entries must fill the section exactly. Instrument re-encodes the
// sections it extends from their count, so bytes an entry does not
// account for (trailing, or missing under a count that promises more)
// would mean something else in the copy.
func entries(section string, data []byte, entry func(r *reader, i uint32) error) error {
	r := reader{b: data}
	n := r.u32()
	if r.err != nil || int64(n) > int64(len(data)-r.off) {
		return malformed(r.err, "the %s section declares %d entries in %d bytes", section, n, len(data))
	}
	for i := range n {
		if err := entry(&r, i); err != nil {
			return err
		}
		if r.err != nil {
			return malformed(r.err, "the %s section's entry %d", section, i)
		}
	}
	return trailing(&r, section, n)
}

// scan reads what Instrument needs from the sections: the types, the
// functions' types, the global count (imported globals come first in the
// index space, then the module's own) and the start function, and
// validates every section it reads (or that Instrument rewrites) to its
// last byte. It refuses a module that exports a name under
// ReservedPrefix, has no memory when p uses one, imports a table,
// declares a table larger than p.TableLimit, names a type past its own
// (the copy may add types) or starts with a function that takes or
// returns values (the copy exports it instead, and an export may have any
// type).
func scan(secs []section, p Probe) (moduleInfo, error) {
	var info moduleInfo
	memories := 0
	var exportedGlobals []uint32
	typeIndex := func(what string, t uint32) error {
		if int(t) >= len(info.results) {
			return fmt.Errorf("%w: %s of type %d, past the module's %d types", ErrInvalid, what, t, len(info.results))
		}
		return nil
	}
	for _, s := range secs {
		var err error
		switch s.id {
		case secType:
			err = entries("type", s.data, func(r *reader, i uint32) error {
				if form := r.byte(); form != 0x60 && r.err == nil {
					return fmt.Errorf("the type section's entry %d: %w: type form %#x", i, ErrUnsupported, form)
				}
				params := r.valTypes()
				start := r.off
				results := r.valTypes()
				info.results = append(info.results, r.b[start:r.off])
				info.void = append(info.void, params == 0 && results == 0)
				return nil
			})
		case secImport:
			var tables int
			err = eachImport(s.data, func(_, _ string, kind byte, typ uint32) error {
				switch kind {
				case 0x00:
					info.funcTypes = append(info.funcTypes, typ)
					info.imported++
					return typeIndex(fmt.Sprintf("the import section's function %d", info.imported-1), typ)
				case 0x01:
					tables++
				case 0x02:
					memories++
				case 0x03:
					info.globals++
				}
				return nil
			})
			if err == nil && tables > 0 && p.TableLimit > 0 {
				// Its size is the exporter's: no limit of ours would hold.
				return info, fmt.Errorf("%w: an imported table", ErrUnsupported)
			}
		case secFunction:
			err = entries("function", s.data, func(r *reader, i uint32) error {
				t := r.u32()
				info.funcTypes = append(info.funcTypes, t)
				if r.err != nil {
					return nil
				}
				return typeIndex(fmt.Sprintf("the function section's function %d", len(info.funcTypes)-1), t)
			})
		case secTable:
			err = checkTables(s.data, p.TableLimit)
		case secStart:
			r := reader{b: s.data}
			info.start, info.hasStart = r.u32(), true
			if r.err != nil {
				return info, malformed(r.err, "the start section")
			}
			if r.off != len(r.b) {
				return info, fmt.Errorf("%w: the start section has %d bytes after its function index", ErrInvalid, len(r.b)-r.off)
			}
		case secMemory:
			err = entries("memory", s.data, func(r *reader, _ uint32) error {
				r.limits()
				memories++
				return nil
			})
		case secGlobal:
			err = entries("global", s.data, func(r *reader, _ uint32) error {
				r.byte() // value type
				r.byte() // mutability
				r.constExpr()
				info.globals++
				return nil
			})
		case secExport:
			err = entries("export", s.data, func(r *reader, _ uint32) error {
				name := r.name()
				if r.err == nil && strings.HasPrefix(name, ReservedPrefix) {
					return fmt.Errorf("module exports %q: names beginning %q are the host's", name, ReservedPrefix)
				}
				kind, index := r.byte(), r.u32()
				if kind == 0x03 {
					exportedGlobals = append(exportedGlobals, index)
				}
				return nil
			})
		}
		if err != nil {
			return info, err
		}
	}
	if p.UsesMemory && memories == 0 {
		return info, fmt.Errorf("%w: the probe needs a memory and the module has none", ErrUnsupported)
	}
	for _, g := range exportedGlobals {
		if g >= info.globals {
			return info, fmt.Errorf("module exports global %d, past its %d: %w", g, info.globals, ErrInvalid)
		}
	}
	if info.hasStart {
		if int(info.start) >= len(info.funcTypes) {
			return info, fmt.Errorf("%w: the start section names function %d, past the module's %d", ErrInvalid, info.start, len(info.funcTypes))
		}
		if !info.void[info.funcTypes[info.start]] {
			return info, fmt.Errorf("%w: the start section names function %d, which takes or returns values", ErrInvalid, info.start)
		}
	}
	return info, nil
}

// checkTables refuses a table section declaring a table whose initial size
// is above limit (when limit is not 0): wazero allocates it whole, 8 bytes
// an entry, at every instantiation.
func checkTables(data []byte, limit uint32) error {
	return entries("table", data, func(r *reader, i uint32) error {
		if r.off < len(r.b) && r.b[r.off] == 0x40 { // a table with an initialiser (wasm 3.0)
			return fmt.Errorf("%w: table %d with an initialiser", ErrUnsupported, i)
		}
		r.refType()
		flags := r.byte()
		if flags > 1 && r.err == nil {
			return fmt.Errorf("%w: table %d limits flags %#x", ErrUnsupported, i, flags)
		}
		min := r.u32()
		if flags&1 != 0 {
			r.u32()
		}
		if r.err == nil && limit > 0 && min > limit {
			return &LimitError{Limit: "table_elements", Max: uint64(limit), Got: uint64(min), What: fmt.Sprintf("table %d initial size", i)}
		}
		return nil
	})
}

// ensureSection inserts an empty (zero-entry) section id where the spec's
// order puts it, unless the module has one.
func ensureSection(secs []section, id byte) []section {
	at := len(secs)
	for i, s := range secs {
		if s.id == id {
			return secs
		}
		if s.id != secCustom && sectionOrder[s.id] > sectionOrder[id] && at == len(secs) {
			at = i
		}
	}
	out := make([]section, 0, len(secs)+1)
	out = append(out, secs[:at]...)
	out = append(out, section{id, []byte{0}})
	return append(out, secs[at:]...)
}

// appendEntries adds entries to a vector section: the new count, the old
// entries, the new ones.
func appendEntries(data []byte, entries [][]byte) ([]byte, error) {
	r := reader{b: data}
	n := r.u32()
	if r.err != nil {
		return nil, r.err
	}
	out := appendU32(nil, n+uint32(len(entries)))
	out = append(out, data[r.off:]...)
	for _, e := range entries {
		out = append(out, e...)
	}
	return out, nil
}

// rewrite is what instrumentCode inserts and checks, per module.
type rewrite struct {
	first   uint32 // the first new global's index
	types   uint32 // the module's own types (the copy may add more)
	funcs   int    // the module's defined functions
	code    func(b []byte, cost uint32) []byte
	bulk    func(b []byte, sub uint32) []byte
	grow    func(table uint32) []byte
	depth   *depthPlan
	atEntry bool
}

// instrumentCode rewrites every function body of the code section.
func instrumentCode(data []byte, rw *rewrite) ([]byte, error) {
	r := reader{b: data}
	n := r.u32()
	if r.err != nil { // an empty section has no count: invalid, and must stay so
		return nil, malformed(r.err, "the code section's count")
	}
	if int(n) != rw.funcs {
		return nil, fmt.Errorf("%w: the code section has %d function bodies for %d declared functions", ErrInvalid, n, rw.funcs)
	}
	out := appendU32(make([]byte, 0, len(data)+len(data)/8), n)
	var body []byte
	var costs []uint32
	var scratch costScratch
	for i := range n {
		size := int(r.u32())
		start := r.off
		r.skip(size)
		if r.err != nil {
			return nil, malformed(r.err, "the code section's body %d", i)
		}
		var err error
		var wrap *bodyDepth
		if rw.depth != nil {
			wrap = &bodyDepth{enter: rw.depth.enter, exit: rw.depth.exit, blockType: rw.depth.blockTypes[i]}
		}
		costs, err = scratch.segmentCosts(costs[:0], r.b[start:r.off])
		if err == nil {
			body, err = instrumentBody(body[:0], r.b[start:r.off], rw, costs, wrap)
		}
		if err != nil {
			return nil, malformed(err, "the code section's body %d", i)
		}
		out = append(appendU32(out, uint32(len(body))), body...)
	}
	if err := trailing(&r, "code", n); err != nil {
		return nil, err
	}
	return out, nil
}

// instrumentBody appends to out one function body (local declarations,
// then instructions) with code after each loop's block type (and at the
// entry if atEntry), given costs[0] at the entry and costs[i] at the i-th
// loop (segmentCosts), bulk before each bulk memory or table operation and
// grow's guard before each table.grow.
//
// It refuses (ErrInvalid) what is invalid in the original but might not
// be in the copy: a global.get or global.set naming a global at or past
// rw.first (in the copy, one of the host's), a block type or
// call_indirect naming a type past the module's (the copy may add types),
// a branch past the function's own label and an end that closes the
// function before its last byte or none at all (the depth bound wraps the
// body in a block, one more label and one more end).
func instrumentBody(out, fn []byte, rw *rewrite, costs []uint32, depth *bodyDepth) ([]byte, error) {
	r := reader{b: fn}
	for range r.u32() { // local declarations: count, type
		r.u32()
		r.byte()
		if r.err != nil {
			return nil, fmt.Errorf("local declarations: %w", r.err)
		}
	}
	out = append(out, fn[:r.off]...)
	if rw.atEntry {
		out = rw.code(out, costs[0])
	}
	loops := 0
	if depth != nil {
		out = append(out, depth.enter...)
		out = append(append(out, 0x02), depth.blockType...) // block: a branch to the function's label now lands here
	}
	open := uint32(0) // blocks, loops and ifs open; the function's own label is open too
	ended := false
	for r.off < len(fn) {
		at := r.off
		op := r.instruction()
		if r.err != nil {
			return nil, fmt.Errorf("instruction at %d: %w", at, r.err)
		}
		imm := reader{b: fn[at+1 : r.off]}
		switch op {
		case 0x02, 0x03, 0x04: // block, loop, if
			open++
			if t := imm.b[0]; t != 0x40 && (t < 0x6f || t > 0x7f) {
				if bt := imm.s33(); bt < 0 || bt >= int64(rw.types) {
					return nil, fmt.Errorf("%w: instruction at %d has block type %d, past the module's %d types", ErrInvalid, at, bt, rw.types)
				}
			}
		case 0x0b:
			if open > 0 {
				open--
				break
			}
			if r.off != len(fn) {
				return nil, fmt.Errorf("%w: the end at %d closes the function before the body's last byte", ErrInvalid, at)
			}
			ended = true
		case 0x0c, 0x0d: // br, br_if
			if l := imm.u32(); l > open {
				return nil, fmt.Errorf("%w: instruction at %d branches to label %d, past the function's %d", ErrInvalid, at, l, open)
			}
		case 0x0e: // br_table
			for range imm.u32() + 1 {
				if l := imm.u32(); l > open {
					return nil, fmt.Errorf("%w: instruction at %d branches to label %d, past the function's %d", ErrInvalid, at, l, open)
				}
			}
		case 0x11, 0x13: // call_indirect, return_call_indirect
			if t := imm.u32(); t >= rw.types {
				return nil, fmt.Errorf("%w: instruction at %d calls type %d, past the module's %d types", ErrInvalid, at, t, rw.types)
			}
		case 0x23, 0x24: // global.get, global.set
			if g := imm.u32(); g >= rw.first {
				return nil, fmt.Errorf("instruction at %d names global %d, past the module's %d: %w", at, g, rw.first, ErrInvalid)
			}
		case 0xfc:
			switch sub := imm.u32(); {
			case rw.bulk != nil && isBulkOp(sub):
				out = rw.bulk(out, sub)
			case rw.grow != nil && sub == 15: // table.grow
				out = append(out, rw.grow(imm.u32())...)
			}
		}
		if depth != nil {
			switch {
			case ended: // the function's end
				out = append(out, 0x0b) // the block's
				out = append(out, depth.exit...)
				out = append(out, 0x0b)
				continue
			case op == 0x0f, op == 0x12, op == 0x13: // return, return_call, return_call_indirect
				out = append(out, depth.exit...)
			}
		}
		out = append(out, fn[at:r.off]...)
		if op == 0x03 { // loop
			loops++
			out = rw.code(out, costs[loops])
		}
	}
	if !ended {
		return nil, fmt.Errorf("%w: the body has no end", ErrInvalid)
	}
	return out, nil
}

// segmentCosts appends to costs, for a function body (local declarations,
// then instructions), the cost of its entry probe and then of each loop
// header's probe in order: a bound on the instructions the function can
// run after the probe before it passes another probe or returns. Without
// passing a probe, control in one activation only moves forward (a branch
// back goes to a loop header; a branch forward to a block's end; a call
// returns to the next instruction), and it cannot enter a loop's body but
// through its header. So from the entry it can reach every instruction
// outside all loops, and from a loop's header every instruction whose
// innermost loop is that loop or one enclosing it; no more. Each is
// counted once: a cost is at least 1 (the loop's end) and at most the
// body's instruction count. One pass, linear in the body.
func segmentCosts(costs []uint32, fn []byte) ([]uint32, error) {
	var s costScratch
	return s.segmentCosts(costs, fn)
}

// costScratch is segmentCosts' working memory, reused from one body to the
// next (instrumenting a 3 MB Go guest allocated 4,000 times without it).
type costScratch struct {
	loops []loopCost
	open  []int
	rest  []uint32
}

// loopCost is what segmentCosts records of one loop.
type loopCost struct {
	parent int    // the enclosing loop's index, or -1
	direct uint32 // instructions whose innermost loop this is
	atEnd  uint32 // the parent's direct count when this loop ended
}

func (s *costScratch) segmentCosts(costs []uint32, fn []byte) ([]uint32, error) {
	r := reader{b: fn}
	for range r.u32() { // local declarations
		r.u32()
		r.byte()
		if r.err != nil {
			return nil, r.err
		}
	}
	loops, open := s.loops[:0], s.open[:0] // open: per open block, if or loop, the loop's index or -1
	defer func() { s.loops, s.open = loops, open }()
	var outside uint32 // instructions outside every loop
	direct := func(l int) *uint32 {
		if l < 0 {
			return &outside
		}
		return &loops[l].direct
	}
	cur := -1 // the innermost open loop, or -1
	for r.off < len(fn) {
		op := r.instruction()
		if r.err != nil {
			return nil, r.err
		}
		*direct(cur)++
		switch op {
		case 0x02, 0x04: // block, if
			open = append(open, -1)
		case 0x03: // loop: its header counts for the parent, its body for itself
			loops = append(loops, loopCost{parent: cur})
			cur = len(loops) - 1
			open = append(open, cur)
		case 0x0b:
			if len(open) == 0 {
				break // the function's end
			}
			if l := open[len(open)-1]; l >= 0 {
				cur = loops[l].parent
				loops[l].atEnd = *direct(cur)
			}
			open = open[:len(open)-1]
		}
	}
	// rest[l]: the instructions reachable after loop l ends, the parent's
	// direct ones after it and what is reachable after the parent ends.
	// A parent comes before its loops, so its rest is known first.
	costs = append(costs, outside)
	rest := slices.Grow(s.rest[:0], len(loops))[:len(loops)]
	s.rest = rest
	for l, lp := range loops {
		if lp.parent >= 0 {
			p := loops[lp.parent]
			rest[l] = p.direct - lp.atEnd + rest[lp.parent]
		}
		// At the function level nothing runs after the body but its end,
		// which outside counts; a loop there reaches the rest of it.
		if lp.parent < 0 {
			rest[l] = outside - lp.atEnd
		}
		costs = append(costs, lp.direct+rest[l])
	}
	return costs, nil
}

// instruction reads one instruction and its immediates, returning the
// opcode. It knows the MVP, sign extension, saturating conversions, bulk
// memory, reference types, multi-memory, tail calls, SIMD and atomics
// encodings, which cover what wazero compiles; anything else (exception
// handling, GC, typed function references) is ErrUnsupported.
func (r *reader) instruction() byte {
	op := r.byte()
	switch {
	case op <= 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b,
		op >= 0x45 && op <= 0xc4, op == 0xd1:
		// no immediates
	case op >= 0x02 && op <= 0x04: // block, loop, if
		r.blockType()
	case op == 0x0c, op == 0x0d, op == 0x10, op == 0x12, op >= 0x20 && op <= 0x26, op == 0xd2:
		r.u32() // label, function, local, global or table index
	case op == 0x0e: // br_table: labels, default
		n := r.u32()
		if int(n) > len(r.b) {
			r.fail(ErrFormat)
		}
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
		r.u32()
		r.u32()
	case op == 0x1c: // select with types
		r.skip(int(r.u32()))
	case op >= 0x28 && op <= 0x3e:
		r.memarg()
	case op == 0x3f, op == 0x40: // memory.size, memory.grow: memory index
		r.u32()
	case op == 0x41:
		r.signed(5)
	case op == 0x42:
		r.signed(10)
	case op == 0x43:
		r.skip(4)
	case op == 0x44:
		r.skip(8)
	case op == 0xd0: // ref.null: heap type
		r.refType()
	case op == 0xfc:
		r.miscImmediates(r.u32())
	case op == 0xfd:
		r.simdImmediates(r.u32())
	case op == 0xfe:
		if r.u32() == 0x03 { // atomic.fence
			r.byte()
		} else {
			r.memarg()
		}
	default:
		r.fail(fmt.Errorf("%w: opcode %#x", ErrUnsupported, op))
	}
	return op
}

// isBulkOp reports whether the 0xfc sub-opcode is a bulk memory or table
// operation whose cost grows with its length: memory.init (8), memory.copy
// (10), memory.fill (11), table.init (12), table.copy (14) or table.fill
// (17).
func isBulkOp(sub uint32) bool {
	switch sub {
	case 8, 10, 11, 12, 14, 17:
		return true
	}
	return false
}

func (r *reader) blockType() {
	if r.off >= len(r.b) {
		r.fail(ErrFormat)
		return
	}
	switch t := r.b[r.off]; {
	case t == 0x40, t >= 0x6f && t <= 0x7f:
		r.off++
	case t&0xc0 == 0x40: // a negative one-byte s33 that is no value type
		r.fail(fmt.Errorf("%w: block type %#x", ErrUnsupported, t))
	default:
		r.signed(5) // type index (s33)
	}
}

func (r *reader) refType() {
	if t := r.byte(); t != 0x70 && t != 0x6f && r.err == nil {
		r.fail(fmt.Errorf("%w: reference type %#x", ErrUnsupported, t))
	}
}

// memarg: alignment, then (multi-memory, alignment bit 6) a memory index,
// then the offset.
func (r *reader) memarg() {
	if r.u32()&0x40 != 0 {
		r.u32()
	}
	r.u64()
}

// miscImmediates reads the 0xfc prefix's: saturating conversions, bulk
// memory and table operations.
func (r *reader) miscImmediates(sub uint32) {
	switch {
	case sub <= 7: // trunc_sat
	case sub == 8: // memory.init: data index, memory index
		r.u32()
		r.u32()
	case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17:
		r.u32() // data.drop, memory.fill, elem.drop, table.grow/size/fill
	case sub == 10, sub == 12, sub == 14: // memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	default:
		r.fail(fmt.Errorf("%w: opcode 0xfc %d", ErrUnsupported, sub))
	}
}

// simdImmediates reads the 0xfd prefix's (fixed-width SIMD).
func (r *reader) simdImmediates(sub uint32) {
	switch {
	case sub <= 11, sub == 92, sub == 93: // loads and stores
		r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		r.skip(16)
	case sub >= 21 && sub <= 34: // extract and replace lane
		r.byte()
	case sub >= 84 && sub <= 91: // load and store lane
		r.memarg()
		r.byte()
	case sub <= 275: // no immediates
	default:
		r.fail(fmt.Errorf("%w: opcode 0xfd %d", ErrUnsupported, sub))
	}
}

// appendS32 appends v as a signed LEB128.
func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// depthPlan is what the call depth bound needs per module: the code to
// insert and, per defined function, the block type of the block that
// wraps its body (its result types), with the types to append for those
// that need a type index.
type depthPlan struct {
	enter, exit []byte
	blockTypes  [][]byte
	newTypes    [][]byte
}

// bodyDepth is depthPlan's part for one body.
type bodyDepth struct {
	enter, exit, blockType []byte
}

// planDepth gives each defined function's wrapper block its results as
// its type. No results or one value type are encoded inline; more
// (multi-value) need a new type () -> results, appended after the
// module's own (no existing type index changes). scan has checked every
// function's type index.
func planDepth(info *moduleInfo) *depthPlan {
	plan := &depthPlan{}
	byResults := map[string][]byte{}
	for _, t := range info.funcTypes[info.imported:] {
		vec := info.results[t] // count, then one byte per value type
		switch r := (reader{b: vec}); r.u32() {
		case 0:
			plan.blockTypes = append(plan.blockTypes, []byte{0x40})
		case 1:
			plan.blockTypes = append(plan.blockTypes, vec[r.off:])
		default:
			bt, ok := byResults[string(vec)]
			if !ok {
				bt = appendS64(nil, int64(len(info.results)+len(plan.newTypes)))
				byResults[string(vec)] = bt
				plan.newTypes = append(plan.newTypes, append([]byte{0x60, 0x00}, vec...))
			}
			plan.blockTypes = append(plan.blockTypes, bt)
		}
	}
	return plan
}

// valTypes skips a vector of value types and returns their count, each
// one byte (numbers, v128, funcref, externref); typed references are
// ErrUnsupported.
func (r *reader) valTypes() uint32 {
	n := r.u32()
	if int64(n) > int64(len(r.b)-r.off) {
		r.fail(fmt.Errorf("%w: %d value types past the end", ErrFormat, n))
	}
	for range n {
		switch t := r.byte(); {
		case r.err != nil:
			return 0
		case t >= 0x7b && t <= 0x7f, t == 0x70, t == 0x6f:
		default:
			r.fail(fmt.Errorf("%w: value type %#x", ErrUnsupported, t))
			return 0
		}
	}
	return n
}

// appendS64 appends v as a signed LEB128.
func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
