// Package wasmbin reads and rewrites the few parts of the WebAssembly binary
// format the host needs before it hands a module to wazero: the import
// names (refused early, before a costly compile) and the instrumentation
// that lets the host stop a running call cheaply (Instrument).
//
// It decodes just enough of the format for those two jobs, and says so with
// ErrUnsupported when a module uses something it does not know; the host
// then refuses the module (it never serves one under a weaker bound).
package wasmbin

import (
	"errors"
	"fmt"
)

var (
	// ErrFormat: the bytes are not a wasm binary this package can parse
	// (the compiler's error is the better message for the user).
	ErrFormat = errors.New("not a wasm binary this parser understands")
	// ErrUnsupported: the module is valid as far as read, but uses an
	// instruction or encoding Instrument does not decode.
	ErrUnsupported = errors.New("wasm feature not supported by the instrumenter")
	// ErrInvalid: the module is invalid in a way the instrumentation would
	// hide (it names a global it does not have, which in the copy would be
	// one of the host's). The host validates every module first anyway;
	// this keeps Instrument's output valid only for valid input.
	ErrInvalid = errors.New("invalid module")
)

// header is the magic number and version 1 of the binary format.
const header = "\x00asm\x01\x00\x00\x00"

// Section ids (WebAssembly core spec 5.5.2).
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secCode      = 10
	secDataCount = 12
	secTag       = 13
)

// sectionOrder is the position each known section must keep (the spec's
// order: type, import, function, table, memory, tag, global, export, start,
// element, data count, code, data). Custom sections may go anywhere.
var sectionOrder = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, secTag: 6, secGlobal: 7, secExport: 8, 8: 9, 9: 10, secDataCount: 11, secCode: 12, 11: 13}

type section struct {
	id   byte
	data []byte
}

// sections splits a module into its sections.
func sections(b []byte) ([]section, error) {
	if len(b) < len(header) || string(b[:len(header)]) != header {
		return nil, ErrFormat
	}
	r := reader{b: b, off: len(header)}
	var out []section
	for r.off < len(r.b) {
		id := r.byte()
		size := r.u32()
		if r.err != nil || int(size) > len(r.b)-r.off {
			return nil, ErrFormat
		}
		out = append(out, section{id, r.b[r.off : r.off+int(size)]})
		r.off += int(size)
	}
	return out, nil
}

// ImportNames returns the (module, name) pairs of the import section, in
// order, without compiling the module.
func ImportNames(b []byte) ([][2]string, error) {
	secs, err := sections(b)
	if err != nil {
		return nil, err
	}
	for _, s := range secs {
		if s.id != secImport {
			continue
		}
		var out [][2]string
		err := eachImport(s.data, func(mod, name string, _ byte) { out = append(out, [2]string{mod, name}) })
		return out, err
	}
	return nil, nil // no import section
}

// eachImport calls f for each entry of an import section.
func eachImport(data []byte, f func(mod, name string, kind byte)) error {
	r := reader{b: data}
	n := r.u32()
	if r.err != nil || int(n) > len(data) {
		return ErrFormat
	}
	for range n {
		mod, name, kind := r.name(), r.name(), r.byte()
		r.importDesc(kind)
		if r.err != nil {
			return r.err
		}
		f(mod, name, kind)
	}
	return nil
}

// reader decodes bytes, LEB128 numbers and names from b at off. The first
// error sticks in err and every later read returns zero, so a sequence of
// reads needs one check at its end.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.off = len(r.b)
}

func (r *reader) byte() byte {
	if r.off >= len(r.b) {
		r.fail(ErrFormat)
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

// leb reads an unsigned LEB128 of at most maxBytes bytes.
func (r *reader) leb(maxBytes int) uint64 {
	var v uint64
	for i := range maxBytes {
		c := r.byte()
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail(ErrFormat)
	return 0
}

func (r *reader) u32() uint32 { return uint32(r.leb(5)) }
func (r *reader) u64() uint64 { return r.leb(10) }

// signed skips a signed LEB128 of at most maxBytes bytes (the value is
// never needed here).
func (r *reader) signed(maxBytes int) { r.leb(maxBytes) }

func (r *reader) skip(n int) {
	if n < 0 || n > len(r.b)-r.off {
		r.fail(ErrFormat)
		return
	}
	r.off += n
}

func (r *reader) name() string {
	n := int(r.u32())
	start := r.off
	r.skip(n)
	if r.err != nil {
		return ""
	}
	return string(r.b[start:r.off])
}

// limits skips a limits encoding: flags, min and an optional max (memory64
// limits, flags 4-7, are 64-bit).
func (r *reader) limits() {
	flags := r.byte()
	if flags > 7 {
		r.fail(ErrFormat)
		return
	}
	r.u64()
	if flags&1 != 0 {
		r.u64()
	}
}

func (r *reader) importDesc(kind byte) {
	switch kind {
	case 0x00: // func: type index
		r.u32()
	case 0x01: // table: reftype, limits
		r.byte()
		r.limits()
	case 0x02: // memory: limits
		r.limits()
	case 0x03: // global: valtype, mutability
		r.byte()
		r.byte()
	case 0x04: // tag: attribute, type index
		r.byte()
		r.u32()
	default:
		r.fail(fmt.Errorf("%w: import kind %#x", ErrFormat, kind))
	}
}
