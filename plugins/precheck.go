package plugins

import (
	"errors"
	"fmt"

	"github.com/volhost/volhost/abi"
)

// precheckImports reads the import section of a wasm binary, without
// compiling it, and refuses a module importing from anything but the
// volhost host module and the allowed WASI calls. Compiling a Go guest
// costs ~1.5 s (~19 s under -race), which a forbidden module should not
// get; signatures are still checked after compilation (validateImports).
// A binary it cannot parse is left to the compiler, which reports why.
func precheckImports(wasm []byte) error {
	imports, err := readImportNames(wasm)
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

var errWasmFormat = errors.New("not a wasm binary this parser understands")

// readImportNames returns the (module, name) pairs of the import section.
func readImportNames(b []byte) ([][2]string, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" || b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return nil, errWasmFormat
	}
	r := wasmReader{b: b, off: 8}
	for r.off < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		if int(size) > len(r.b)-r.off {
			return nil, errWasmFormat
		}
		if id != 2 { // not the import section
			r.off += int(size)
			continue
		}
		sec := wasmReader{b: r.b[r.off : r.off+int(size)]}
		n, err := sec.u32()
		if err != nil || int(n) > len(sec.b) {
			return nil, errWasmFormat
		}
		out := make([][2]string, 0, n)
		for i := uint32(0); i < n; i++ {
			mod, err1 := sec.name()
			name, err2 := sec.name()
			kind, err3 := sec.byte()
			if err := errors.Join(err1, err2, err3); err != nil {
				return nil, err
			}
			if err := sec.skipImportDesc(kind); err != nil {
				return nil, err
			}
			out = append(out, [2]string{mod, name})
		}
		return out, nil
	}
	return nil, nil // no import section
}

type wasmReader struct {
	b   []byte
	off int
}

func (r *wasmReader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errWasmFormat
	}
	r.off++
	return r.b[r.off-1], nil
}

// u32 reads an unsigned LEB128 of at most 5 bytes.
func (r *wasmReader) u32() (uint32, error) {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errWasmFormat
}

func (r *wasmReader) name() (string, error) {
	n, err := r.u32()
	if err != nil || int(n) > len(r.b)-r.off {
		return "", errWasmFormat
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

// limits skips a limits encoding (flags, min, optional max); memory64
// limits use LEB128 u64, which u32 cannot read: such modules go to the
// compiler.
func (r *wasmReader) limits() error {
	flags, err := r.byte()
	if err != nil || flags > 3 {
		return errWasmFormat
	}
	if _, err := r.u32(); err != nil {
		return err
	}
	if flags&1 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

func (r *wasmReader) skipImportDesc(kind byte) error {
	switch kind {
	case 0x00: // func: type index
		_, err := r.u32()
		return err
	case 0x01: // table: reftype, limits
		if _, err := r.byte(); err != nil {
			return err
		}
		return r.limits()
	case 0x02: // memory: limits
		return r.limits()
	case 0x03: // global: valtype, mutability
		if _, err := r.byte(); err != nil {
			return err
		}
		_, err := r.byte()
		return err
	case 0x04: // tag: attribute, type index
		if _, err := r.byte(); err != nil {
			return err
		}
		_, err := r.u32()
		return err
	}
	return errWasmFormat
}
