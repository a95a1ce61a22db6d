package wasmbin

import (
	"errors"
	"strings"
	"testing"
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
	for name, m := range hostileSeeds() {
		mods["hostile seed "+name] = m
	}
	for name, m := range mods {
		if err := CheckCounts(m); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
