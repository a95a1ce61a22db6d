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
		err := eachImport(s.data, func(mod, name string, _ byte, _ uint32) error {
			out = append(out, [2]string{mod, name})
			return nil
		})
		return out, err
	}
	return nil, nil // no import section
}

// eachImport calls f for each entry of an import section, with the type
// index of a function or tag import (0 for the others), and requires the
// entries to fill the section exactly.
func eachImport(data []byte, f func(mod, name string, kind byte, typ uint32) error) error {
	r := reader{b: data}
	n := r.u32()
	if r.err != nil || int64(n) > int64(len(data)-r.off) {
		return malformed(r.err, "the import section declares %d entries in %d bytes", n, len(data))
	}
	for i := range n {
		mod, name, kind := r.name(), r.name(), r.byte()
		typ := r.importDesc(kind)
		if r.err != nil {
			return malformed(r.err, "the import section's entry %d", i)
		}
		if err := f(mod, name, kind, typ); err != nil {
			return err
		}
	}
	return trailing(&r, "import", n)
}

// malformed is err, a reader's error in a section or entry the message
// names, as ErrInvalid too: bytes that end inside an entry or a number
// that does not fit its type make the module invalid. An encoding this
// package does not decode (ErrUnsupported) may be valid and stays only
// that.
func malformed(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s", ErrInvalid, msg)
	case errors.Is(err, ErrUnsupported):
		return fmt.Errorf("%s: %w", msg, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrInvalid, msg, err)
}

// trailing refuses bytes left in a section after its n entries: the
// copy would keep them where they no longer trail (an export section of
// count 0 and four bytes more, re-encoded with the host's exports after
// them, made the bytes the start of an entry and validated:
// FuzzInstrument's find).
func trailing(r *reader, section string, n uint32) error {
	if r.off != len(r.b) {
		return fmt.Errorf("%w: the %s section has %d bytes after its %d entries", ErrInvalid, section, len(r.b)-r.off, n)
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

// leb reads an unsigned LEB128 of at most maxBytes bytes holding a
// number of bits bits: the last byte's bits past them must be zero, as the
// spec (and wazero) require. Accepting them would read a count of 2^32+1
// as 1, which Instrument re-encodes as 1 plus its own entries: an invalid
// module in, a valid copy out.
func (r *reader) leb(maxBytes, bits int) uint64 {
	var v uint64
	for i := range maxBytes {
		c := r.byte()
		if i == maxBytes-1 && c>>(bits-7*i) != 0 && r.err == nil {
			r.fail(fmt.Errorf("%w: a LEB128 number over %d bits", ErrFormat, bits))
			return 0
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail(ErrFormat)
	return 0
}

func (r *reader) u32() uint32 { return uint32(r.leb(5, 32)) }
func (r *reader) u64() uint64 { return r.leb(10, 64) }

// signed skips a signed LEB128 of at most maxBytes bytes (the value is
// never needed here: the bytes are copied as they are, so wazero judges
// the same encoding in the original and the copy).
func (r *reader) signed(maxBytes int) {
	for range maxBytes {
		if r.byte()&0x80 == 0 {
			return
		}
	}
	r.fail(ErrFormat)
}

// s33 reads a signed 33-bit LEB128 (a block type's type index).
func (r *reader) s33() int64 {
	var v int64
	for i := range 5 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= int64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			if c&0x40 != 0 {
				v |= -1 << (7 * (i + 1))
			}
			if v < -1<<32 || v >= 1<<32 {
				r.fail(fmt.Errorf("%w: a LEB128 number over 33 bits", ErrFormat))
				return 0
			}
			return v
		}
	}
	r.fail(ErrFormat)
	return 0
}

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

// importDesc skips an import's description, returning a function's or a
// tag's type index.
func (r *reader) importDesc(kind byte) uint32 {
	switch kind {
	case 0x00: // func: type index
		return r.u32()
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
		return r.u32()
	default:
		r.fail(fmt.Errorf("%w: import kind %#x", ErrFormat, kind))
	}
	return 0
}
