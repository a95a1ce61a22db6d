package wasmbin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// malformedModules are modules wazero refuses whose every section
// Instrument reads disagrees with its bytes in one way (trailing or
// missing bytes, a count that is not a u32, a structure or index the
// instrumentation would make valid): one or more per section kind, with
// the section the error must name. Before each was refused, Instrument
// re-encoded what it had parsed, and several copies validated
// (FuzzInstrument's find: an export section of count 0 and four trailing
// bytes).
func malformedModules() []struct {
	name, section string
	wasm          []byte
} {
	types := sec(1, vec([]byte{0x60, 0x00, 0x00}))
	funcs := sec(3, vec([]byte{0}))
	memory := sec(5, vec([]byte{0x00, 0x01}))
	code := sec(10, vec(body([]byte{0}, 0x0b)))
	// multi: type 1 returns two values, so the depth bound appends type 2,
	// () -> (i32, i32), for function 1's wrapper block.
	multiTypes := sec(1, vec([]byte{0x60, 0x00, 0x00}, []byte{0x60, 0x00, 0x02, 0x7f, 0x7f}))
	multiFuncs := sec(3, vec([]byte{0}, []byte{1}))
	multiBody := body([]byte{0}, 0x41, 0x00, 0x41, 0x00, 0x0b)
	imp := func(kind byte, desc ...byte) []byte {
		return append(append(append(name("env"), name("x")...), kind), desc...)
	}
	return []struct {
		name, section string
		wasm          []byte
	}{
		{"type: trailing byte", "type section", module(sec(1, append(vec([]byte{0x60, 0x00, 0x00}), 0x00)), funcs, memory, code)},
		{"type: entry missing", "type section", module(sec(1, append(appendU32(nil, 2), 0x60, 0x00, 0x00)), funcs, memory, code)},
		{"type: parameter count past the entry", "type section", module(sec(1, vec([]byte{0x60, 0x05, 0x7f})), funcs, memory, code)},
		{"import: trailing byte", "import section", module(types, sec(2, append(vec(imp(0x00, 0x00)), 0x00)), funcs, memory,
			sec(10, vec(body([]byte{0}, 0x0b))))},
		{"import: function of a type the copy adds", "import section", module(multiTypes, sec(2, vec(imp(0x00, 0x02))), multiFuncs, memory,
			sec(10, vec(body([]byte{0}, 0x0b), multiBody)))},
		{"function: trailing byte", "function section", module(types, sec(3, append(vec([]byte{0}), 0x00)), memory, code)},
		{"table: trailing byte", "table section", module(types, funcs, sec(4, append(vec([]byte{0x70, 0x00, 0x01}), 0x00)), memory, code)},
		{"memory: trailing byte", "memory section", module(types, funcs, sec(5, append(vec([]byte{0x00, 0x01}), 0x00)), code)},
		{"memory: entry missing", "memory section", module(types, funcs, sec(5, appendU32(nil, 1)), code)},
		{"global: trailing byte", "global section", module(types, funcs, memory, sec(6, append(vec([]byte{0x7f, 0x01, 0x41, 0x00, 0x0b}), 0x00)), code)},
		{"global: count over 32 bits", "global section", module(types, funcs, memory,
			sec(6, []byte{0x81, 0x80, 0x80, 0x80, 0x10, 0x7f, 0x01, 0x41, 0x00, 0x0b}), code)},
		{"export: trailing bytes (the fuzz find)", "export section", module(types, funcs, memory, sec(7, append(vec(), 0x13, '0', '0', '0')), code)},
		{"export: entry missing", "export section", module(types, funcs, memory, sec(7, appendU32(nil, 1)), code)},
		{"start: trailing byte", "start section", module(types, funcs, memory, sec(8, []byte{0x00, 0x00}), code)},
		{"start: repeated", "start section", module(types, funcs, memory, sec(8, []byte{0}), sec(8, []byte{0}), code)},
		{"start: out of order", "start section", module(types, funcs, sec(8, []byte{0}), memory, code)},
		{"start: function with a result", "start", module(sec(1, vec([]byte{0x60, 0x00, 0x01, 0x7f})), funcs, memory, sec(8, []byte{0}),
			sec(10, vec(body([]byte{0}, 0x41, 0x00, 0x0b))))},
		{"code: trailing byte", "code section", module(types, funcs, memory, sec(10, append(vec(body([]byte{0}, 0x0b)), 0x00)))},
		{"code: body count over 32 bits", "code section", module(types, funcs, memory,
			sec(10, append([]byte{0x81, 0x80, 0x80, 0x80, 0x10}, body([]byte{0}, 0x0b)...)))},
		{"code: instruction after the body's end", "code section", module(types, funcs, memory, sec(10, vec(body([]byte{0}, 0x0b, 0x01))))},
		{"code: block closed after the body's end", "code section", module(types, funcs, memory,
			sec(10, vec(body([]byte{0}, 0x0b, 0x02, 0x40, 0x0b, 0x0b))))},
		{"code: body without its end", "code section", module(types, funcs, memory, sec(10, vec(body([]byte{0}, 0x01))))},
		{"code: branch past the function's label", "code section", module(types, funcs, memory, sec(10, vec(body([]byte{0}, 0x0c, 0x01, 0x0b))))},
		{"code: br_table past the function's label", "code section", module(types, funcs, memory,
			sec(10, vec(body([]byte{0}, 0x41, 0x00, 0x0e, 0x01, 0x00, 0x01, 0x0b))))},
		{"code: block of a type the copy adds", "code section", module(multiTypes, multiFuncs, memory,
			sec(10, vec(body([]byte{0}, 0x02, 0x02, 0x41, 0x00, 0x41, 0x00, 0x0b, 0x1a, 0x1a, 0x0b), multiBody)))},
		{"code: call_indirect of a type the copy adds", "code section", module(multiTypes, multiFuncs,
			sec(4, vec([]byte{0x70, 0x00, 0x01})), memory,
			sec(10, vec(body([]byte{0}, 0x41, 0x00, 0x11, 0x02, 0x00, 0x1a, 0x1a, 0x0b), multiBody)))},
		{"code: local count over 32 bits", "code section", module(types, funcs, memory,
			sec(10, vec(body([]byte{0x01, 0x81, 0x80, 0x80, 0x80, 0x10, 0x7f}, 0x0b))))},
		{"unknown section id", "section 14", module(types, funcs, memory, code, sec(14, []byte{0}))},
	}
}

// TestInstrumentRefusesMalformed: Instrument validates what it parses
// before it rewrites it. Each module is invalid (wazero refuses it), and
// Instrument refuses it too, with ErrInvalid naming the section, instead
// of re-encoding it into something else.
func TestInstrumentRefusesMalformed(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	p := Preempt
	p.TableLimit, p.DepthLimit = 1<<16, 1000
	for _, tc := range malformedModules() {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := rt.CompileModule(ctx, tc.wasm); err == nil {
				_ = c.Close(ctx)
				t.Fatal("the test module validates: it must be invalid")
			}
			_, err := Instrument(tc.wasm, p)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.section) {
				t.Fatalf("err = %v, want it to name %q", err, tc.section)
			}
		})
	}
}
