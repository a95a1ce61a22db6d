package wasmbin

import (
	"errors"
	"fmt"
)

// MaxFunctionLocals is the most locals one function may declare, the
// WebAssembly JS API's implementation limit (50,000, parameters
// included there; here the declared locals alone, which is looser). A Go
// or AssemblyScript guest declares a few dozen.
const MaxFunctionLocals = 50_000

// vectorSections are the sections whose payload starts with a count of
// entries, each at least one byte long.
var vectorSections = map[byte]string{
	secType: "type", secImport: "import", secFunction: "function", secTable: "table",
	secMemory: "memory", secGlobal: "global", secExport: "export", 9: "element",
	secCode: "code", 11: "data", secTag: "tag",
}

// CheckCounts refuses a module whose counts promise more than its bytes
// can hold, before anything decodes it. wazero's decoder allocates by the
// count it reads (make([]T, count) for a section's entries, a function's
// locals, a type's parameters), and Go's out-of-memory is fatal to the
// whole process, not an error: a 20-byte module declaring 3,351,758,791
// element segments made wazero ask for 100 GiB and killed the agent before
// any check of the host ran (FuzzInstrument found it). So every section's
// entry count must fit in the bytes after it, every parameter and result
// count of a type, every element or data segment's entries and every
// name map of the "name" section in theirs, every code body's size in
// its section, and a function's declared locals must stay within
// MaxFunctionLocals. It reads what it
// checks, nothing more: the full validation is still wazero's.
func CheckCounts(b []byte) error {
	secs, err := sections(b)
	if err != nil {
		return err
	}
	for _, s := range secs {
		if s.id == 0 {
			if err := checkNameCounts(s.data); err != nil {
				return err
			}
			continue
		}
		name, ok := vectorSections[s.id]
		if !ok {
			continue
		}
		r := reader{b: s.data}
		n := r.u32()
		if r.err != nil {
			return fmt.Errorf("%w: the %s section's entry count is not a valid number", ErrFormat, name)
		}
		if rest := len(s.data) - r.off; int64(n) > int64(rest) {
			return fmt.Errorf("%w: the %s section declares %d entries in %d bytes", ErrFormat, name, n, rest)
		}
		switch s.id {
		case secType:
			err = checkTypeCounts(&r, n)
		case secCode:
			err = checkCodeCounts(&r, n)
		case 9:
			err = checkElementCounts(&r, n)
		case 11:
			err = checkDataCounts(&r, n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fits reads a count and reports whether that many entries of at least
// one byte each fit in what is left of r.
func (r *reader) fits() (uint32, bool) {
	n := r.u32()
	return n, r.err == nil && int64(n) <= int64(len(r.b)-r.off)
}

// constExpr skips a constant expression (instructions up to its end).
func (r *reader) constExpr() {
	for r.err == nil && r.instruction() != 0x0b {
	}
}

// checkElementCounts checks the vector of each of n element segments
// (the eight encodings of the spec's element section); an encoding it
// does not know is left to the full decoder, which refuses it.
func checkElementCounts(r *reader, n uint32) error {
	for i := range n {
		flags := r.u32()
		switch flags {
		case 0, 4:
			r.constExpr()
		case 1, 3, 5, 7:
			r.byte() // elemkind or reftype
		case 2, 6:
			r.u32() // table index
			r.constExpr()
			r.byte()
		default:
			return nil
		}
		c, ok := r.fits()
		if !ok {
			return fmt.Errorf("%w: element segment %d declares %d entries past its section", ErrFormat, i, c)
		}
		for range c {
			if flags < 4 {
				r.u32() // function index
			} else {
				r.constExpr()
			}
		}
		if r.err != nil {
			return nil
		}
	}
	return nil
}

// checkDataCounts checks the byte count of each of n data segments.
func checkDataCounts(r *reader, n uint32) error {
	for i := range n {
		switch r.u32() {
		case 0:
			r.constExpr()
		case 1:
		case 2:
			r.u32() // memory index
			r.constExpr()
		default:
			return nil
		}
		c, ok := r.fits()
		if !ok {
			return fmt.Errorf("%w: data segment %d declares %d bytes past its section", ErrFormat, i, c)
		}
		r.skip(int(c))
	}
	return nil
}

// checkNameCounts checks the "name" custom section's function and local
// name maps; any other custom section is not decoded by wazero.
func checkNameCounts(data []byte) error {
	r := reader{b: data}
	if r.name() != "name" || r.err != nil {
		return nil
	}
	for r.off < len(r.b) && r.err == nil {
		id := r.byte()
		size := r.u32()
		if r.err != nil || int64(size) > int64(len(r.b)-r.off) {
			return fmt.Errorf("%w: name subsection %d is %d bytes long, past its section", ErrFormat, id, size)
		}
		sub := reader{b: r.b[r.off : r.off+int(size)]}
		r.skip(int(size))
		if id != 1 && id != 2 {
			continue
		}
		c, ok := sub.fits()
		if !ok {
			return fmt.Errorf("%w: name subsection %d declares %d names in %d bytes", ErrFormat, id, c, size)
		}
		for range c {
			sub.u32() // function index
			if id == 1 {
				sub.name()
				continue
			}
			locals, ok := sub.fits()
			if !ok {
				return fmt.Errorf("%w: name subsection 2 declares %d local names past its end", ErrFormat, locals)
			}
			for range locals {
				sub.u32()
				sub.name()
			}
		}
	}
	return nil
}

// checkTypeCounts checks the parameter and result counts of n function
// types (0x60, vec(valtype), vec(valtype)); anything else is left to the
// full decoder, which refuses it.
func checkTypeCounts(r *reader, n uint32) error {
	for i := range n {
		if r.byte() != 0x60 {
			return nil
		}
		for range 2 {
			c := r.u32()
			if r.err != nil || int64(c) > int64(len(r.b)-r.off) {
				return fmt.Errorf("%w: type %d declares %d value types in %d bytes", ErrFormat, i, c, len(r.b)-r.off)
			}
			r.skip(int(c))
		}
		if r.err != nil {
			return nil
		}
	}
	return nil
}

// checkCodeCounts checks n code bodies: each body's size fits in the
// section, and its locals declarations (vec(count, valtype)) fit in the
// body and sum to at most MaxFunctionLocals.
func checkCodeCounts(r *reader, n uint32) error {
	for i := range n {
		size := r.u32()
		if r.err != nil || int64(size) > int64(len(r.b)-r.off) {
			return fmt.Errorf("%w: code body %d is %d bytes long, past its section", ErrFormat, i, size)
		}
		body := reader{b: r.b[r.off : r.off+int(size)]}
		r.skip(int(size))
		groups := body.u32()
		if body.err != nil || int64(groups) > int64(len(body.b)-body.off) {
			return fmt.Errorf("%w: code body %d declares %d local groups in %d bytes", ErrFormat, i, groups, len(body.b)-body.off)
		}
		var locals uint64
		for range groups {
			locals += uint64(body.u32())
			body.byte()
			if body.err != nil {
				return fmt.Errorf("%w: code body %d's locals are truncated", ErrFormat, i)
			}
			if locals > MaxFunctionLocals {
				return fmt.Errorf("%w: function %d declares more than %d locals", ErrInvalid, i, MaxFunctionLocals)
			}
		}
	}
	return nil
}

// ErrRuntimeCannotRead: the module is valid WebAssembly but the runtime the
// host embeds cannot read it; the error says what to change in the module.
var ErrRuntimeCannotRead = errors.New("valid, but the runtime (wazero v1.12.0) cannot read it")

// CheckReadable refuses, with a reason an operator can act on, the one
// valid module shape wazero v1.12.0 is known to refuse: one whose last
// section is a custom section holding its name and nothing after it. Its
// decoder reads the empty payload with bytes.Reader.Read, which says EOF at
// the end of the input, so the module was refused with "failed to read
// custom section name[N]: EOF", naming neither the section nor a fix
// (FuzzInstrument found it, testdata/fuzz 3366a42f...).
func CheckReadable(b []byte) error {
	secs, err := sections(b)
	if err != nil || len(secs) == 0 || secs[len(secs)-1].id != secCustom {
		return nil // CheckCounts and wazero report a malformed module
	}
	r := reader{b: secs[len(secs)-1].data}
	name := r.name()
	if r.err == nil && r.off == len(r.b) {
		return fmt.Errorf("%w: the module ends in the custom section %q, which has no content after its name; drop the section, give it content or move it before another section", ErrRuntimeCannotRead, name)
	}
	return nil
}
