// Package pluginstest builds the example Wasm modules for tests in any
// package and points them at the one on-disk wazero compilation cache that
// every test package and run shares (DESIGN "Testing notes": compiling a Go
// guest takes ~19 s under -race, loading it from the cache ~0.4 s).
package pluginstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	built  = map[string]error{}
	outDir string
)

// RepoRoot is the volhost repository root (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// CacheDir is the shared compilation cache: $VOLHOST_WAZERO_CACHE (set by
// the Makefile), else a directory under the user's cache directory. It is
// created if missing; if that fails, wazero's own error names the directory.
func CacheDir() string {
	dir := os.Getenv("VOLHOST_WAZERO_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "volhost", "wazero-v1.12.0")
	}
	_ = os.MkdirAll(dir, 0o755)
	return dir
}

// Wasm returns examples/plugins/NAME built as a wasip1 c-shared module,
// building it once per test binary (Go's build cache makes that ~1 s).
func Wasm(t testing.TB, name string) []byte {
	t.Helper()
	mu.Lock()
	if outDir == "" {
		dir, err := os.MkdirTemp("", "volhost-modules-")
		if err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
		outDir = dir
	}
	out := filepath.Join(outDir, name+".wasm")
	err, done := built[name]
	if !done {
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./examples/plugins/"+name)
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, cerr := cmd.CombinedOutput(); cerr != nil {
			err = fmt.Errorf("building example module %s: %v\n%s", name, cerr, b)
		}
		built[name] = err
	}
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Install writes module NAME (the example's wasm under the name as, with
// the manifest text hcl) into dir the way a deploy tool would: each file
// written aside and renamed into place, manifest first.
func Install(t testing.TB, dir, as string, wasm []byte, hcl string) {
	t.Helper()
	for _, f := range []struct {
		name string
		data []byte
	}{{as + ".hcl", []byte(hcl)}, {as + ".wasm", wasm}} {
		tmp := filepath.Join(dir, ".tmp-"+f.name)
		if err := os.WriteFile(tmp, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			t.Fatal(err)
		}
	}
}
