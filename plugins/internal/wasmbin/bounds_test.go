package wasmbin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// countBombs are modules a few bytes long whose counts make wazero's
// decoder allocate gigabytes: each is refused by CheckCounts, naming
// what is wrong, before anything decodes it.
func countBombs() map[string]struct {
	wasm []byte
	want string
} {
	huge := appendU32(nil, 0xfffffff0)
	types := sec(1, vec([]byte{0x60, 0x00, 0x00}))
	funcs := sec(3, vec([]byte{0}))
	return map[string]struct {
		wasm []byte
		want string
	}{
		// FuzzInstrument's find (testdata/fuzz/FuzzInstrument/42b5b3ee995a36c5):
		// an element count whose LEB runs past its section; wazero read
		// it on into the next section and asked for 100 GiB.
		"element count past its section": {[]byte("\x00asm\x01\x00\x00\x00\t\x04\xc7\xc7\xc7\xc7\x05\x040000"), "element section's entry count"},
		"element segments":               {module(sec(9, huge)), "element section declares 4294967280 entries in 0 bytes"},
		"exports":                        {module(sec(7, huge)), "export section declares"},
		"functions":                      {module(sec(3, huge)), "function section declares"},
		"data segments":                  {module(sec(11, huge)), "data section declares"},
		"type parameters":                {module(sec(1, append(appendU32(nil, 1), append([]byte{0x60}, huge...)...))), "type 0 declares 4294967280 value types"},
		"locals": {module(types, funcs, sec(10, vec(body(
			append(append(appendU32(nil, 2), append(appendU32(nil, 1<<31), 0x7f)...), append(appendU32(nil, 1<<31), 0x7f)...), 0x0b)))),
			"more than 50000 locals"},
		"element segment entries":    {module(sec(9, append(appendU32(nil, 1), append([]byte{0x00, 0x41, 0x00, 0x0b}, huge...)...))), "element segment 0 declares 4294967280 entries"},
		"data segment bytes":         {module(sec(11, append(appendU32(nil, 1), append([]byte{0x01}, huge...)...))), "data segment 0 declares 4294967280 bytes"},
		"function names":             {module(sec(0, append(name("name"), append([]byte{0x01, 0x05}, huge...)...))), "name subsection 1 declares 4294967280 names"},
		"local names":                {module(sec(0, append(name("name"), append([]byte{0x02, 0x07, 0x01, 0x00}, huge...)...))), "name subsection 2 declares 4294967280 local names"},
		"code body past its section": {module(types, funcs, sec(10, append(appendU32(nil, 1), appendU32(nil, 1000)...))), "code body 0 is 1000 bytes long"},
	}
}

func TestCheckCountsRefusesCountBombs(t *testing.T) {
	for name, tc := range countBombs() {
		t.Run(name, func(t *testing.T) {
			err := CheckCounts(tc.wasm)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckCounts = %v, want an error naming %q", err, tc.want)
			}
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v is neither ErrFormat nor ErrInvalid", err)
			}
		})
	}
}

// Well-formed modules pass, including ones with many locals within the
// limit and the modules the instrumenter must refuse for other reasons.
func TestCheckCountsPassesWellFormedModules(t *testing.T) {
	types := sec(1, vec([]byte{0x60, 0x00, 0x00}))
	funcs := sec(3, vec([]byte{0}))
	mods := map[string][]byte{
		"test module": testModule(),
		"locals at the limit": module(types, funcs, sec(10, vec(body(
			append(appendU32(nil, 1), append(appendU32(nil, MaxFunctionLocals), 0x7f)...), 0x0b)))),
	}
	// An element segment of every encoding, a data segment of each, a
	// name section with function and local names.
	mods["segments and names"] = module(types, funcs,
		sec(4, vec([]byte{0x70, 0x00, 0x01})), sec(5, vec([]byte{0x00, 0x01})),
		sec(9, vec(
			[]byte{0x00, 0x41, 0x00, 0x0b, 0x01, 0x00},
			[]byte{0x01, 0x00, 0x01, 0x00},
			[]byte{0x02, 0x00, 0x41, 0x00, 0x0b, 0x00, 0x01, 0x00},
			[]byte{0x03, 0x00, 0x01, 0x00},
			[]byte{0x04, 0x41, 0x00, 0x0b, 0x01, 0xd2, 0x00, 0x0b},
			[]byte{0x05, 0x70, 0x01, 0xd2, 0x00, 0x0b},
			[]byte{0x06, 0x00, 0x41, 0x00, 0x0b, 0x70, 0x01, 0xd2, 0x00, 0x0b},
			[]byte{0x07, 0x70, 0x01, 0xd0, 0x70, 0x0b},
		)),
		sec(10, vec(body([]byte{0}, 0x0b))),
		sec(11, vec([]byte{0x00, 0x41, 0x00, 0x0b, 0x02, 'h', 'i'}, []byte{0x01, 0x01, 'x'}, []byte{0x02, 0x00, 0x41, 0x00, 0x0b, 0x00})),
		sec(0, append(name("name"), append(append([]byte{0x01}, vec1(append([]byte{0x00}, name("f")...))...),
			append([]byte{0x02}, vec1(append([]byte{0x00, 0x01, 0x00}, name("l")...))...)...)...)),
	)
	for name, m := range hostileSeeds() {
		mods["hostile seed "+name] = m
	}
	for name, m := range mods {
		if err := CheckCounts(m); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The segments-and-names module is one wazero accepts, so the walk
	// above went through every encoding rather than stopping early.
	rt := wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(context.Background())
	if _, err := rt.CompileModule(context.Background(), mods["segments and names"]); err != nil {
		t.Fatalf("the segments-and-names module does not validate: %v", err)
	}
}

// vec1 frames one vector of one entry as a subsection payload: its size,
// then the count 1 and the entry.
func vec1(entry []byte) []byte {
	payload := append([]byte{0x01}, entry...)
	return append(appendU32(nil, uint32(len(payload))), payload...)
}

// TestCheckReadable: a module ending in a custom section with nothing after
// its name is refused with ErrRuntimeCannotRead naming the section; the
// same section with content, or followed by another section, is not.
func TestCheckReadable(t *testing.T) {
	types := sec(secType, []byte{1, 0x60, 0, 0})
	cases := map[string]struct {
		wasm    []byte
		refused bool
	}{
		"empty custom section last":     {module(types, sec(secCustom, name("note"))), true},
		"custom section with content":   {module(types, sec(secCustom, append(name("note"), 'x'))), false},
		"empty custom section not last": {module(sec(secCustom, name("note")), types), false},
		"no custom section":             {module(types), false},
	}
	for label, c := range cases {
		t.Run(label, func(t *testing.T) {
			err := CheckReadable(c.wasm)
			if !c.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrRuntimeCannotRead) || !strings.Contains(err.Error(), `"note"`) {
				t.Fatalf("got %v, want ErrRuntimeCannotRead naming \"note\"", err)
			}
		})
	}
}

// TestCheckReadablePinnedToWazero: CheckReadable works around one defect of
// the wazero version the module builds with, and its error names that
// version. An upgrade of wazero fails this test until someone rechecks the
// defect (FuzzInstrument's seed testdata/fuzz/FuzzInstrument/3366a42f1437c4f1,
// or a module ending in sec(0, name("note"))) and updates the version in
// ErrRuntimeCannotRead, or removes CheckReadable if the new version reads
// such a module.
func TestCheckReadablePinnedToWazero(t *testing.T) {
	// Test binaries carry no dependency versions in their build
	// information, so the version is read where it is pinned.
	mod, err := os.ReadFile(filepath.Join("..", "..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mod)) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "github.com/tetratelabs/wazero" {
			continue
		}
		if want := "wazero " + f[1]; !strings.Contains(ErrRuntimeCannotRead.Error(), want) {
			t.Fatalf("go.mod pins wazero %s but ErrRuntimeCannotRead says %q: recheck the empty trailing custom section defect with this version, then update the version there or remove CheckReadable", f[1], ErrRuntimeCannotRead)
		}
		return
	}
	t.Fatal("go.mod does not require github.com/tetratelabs/wazero")
}
