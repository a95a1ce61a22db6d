package plugins

import (
	"strings"
	"testing"

	"github.com/volhost/volhost/plugins/internal/wasmbin"
)

func TestImportNames(t *testing.T) {
	// A hand-assembled module: imports volhost.log (func), env.mem (memory
	// with max) and wasi_snapshot_preview1.fd_write (func).
	imp := func(mod, name string, desc ...byte) []byte {
		b := append([]byte{byte(len(mod))}, mod...)
		b = append(append(b, byte(len(name))), name...)
		return append(b, desc...)
	}
	body := []byte{3}
	body = append(body, imp("volhost", "log", 0x00, 0)...)
	body = append(body, imp("env", "mem", 0x02, 0x01, 1, 2)...)
	body = append(body, imp("wasi_snapshot_preview1", "fd_write", 0x00, 1)...)
	mod := append([]byte("\x00asm\x01\x00\x00\x00"), 0x00, 2, 1, 'x') // a custom section first
	mod = append(append(mod, 0x02, byte(len(body))), body...)

	got, err := wasmbin.ImportNames(mod)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"volhost", "log"}, {"env", "mem"}, {"wasi_snapshot_preview1", "fd_write"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("import %d = %v, want %v", i, got[i], want[i])
		}
	}
	if err := precheckImports(mod); err == nil || !strings.Contains(err.Error(), "imports env.mem") {
		t.Fatalf("precheckImports = %v, want a refusal naming env.mem", err)
	}
	// Truncations are never a panic, and leave the verdict to the compiler.
	for i := 0; i < len(mod); i++ {
		_, _ = wasmbin.ImportNames(mod[:i])
		if i < len(mod)-len(body) && precheckImports(mod[:i]) != nil {
			t.Fatalf("truncated at %d: precheck refused instead of leaving it to the compiler", i)
		}
	}
}

func TestPrecheckAcceptsExamples(t *testing.T) {
	for _, name := range []string{"default-policy", "fault-policy"} {
		if err := precheckImports(exampleWasm(t, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := precheckImports(exampleWasm(t, "fault-import")); err == nil || !strings.Contains(err.Error(), "env.forbidden") {
		t.Errorf("fault-import: %v", err)
	}
}
