// Package pluginstest builds the example Wasm modules for tests in any
// package and points them at the one on-disk wazero compilation cache that
// every test package and run shares: compiling a Go guest under -race is
// slow, loading it from the cache is not (BenchmarkCompile).
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

// TestModules is where the deliberately faulty modules live, relative to
// the repository root: only tests load them.
const TestModules = "plugins/pluginstest/modules"

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

// Wasm returns module NAME built once per test binary: an example under
// examples/plugins/NAME or a deliberately faulty test module under
// plugins/pluginstest/modules/NAME (kept out of examples/plugins so that
// `make run`'s module directory holds only working modules). A Go module is
// built as a wasip1 c-shared module (Go's build cache makes that ~1 s), an
// AssemblyScript one (a folder with assembly/index.ts; see asWasm) with
// abi/guest-as's compiler.
func Wasm(t testing.TB, name string) []byte {
	t.Helper()
	if _, err := os.Stat(filepath.Join(RepoRoot(), "examples", "plugins", name, "assembly", "index.ts")); err == nil {
		return asWasm(t, name)
	}
	if _, err := os.Stat(filepath.Join(RepoRoot(), TestModules, name, "assembly", "index.ts")); err == nil {
		return asWasm(t, name) // an AssemblyScript test module (as-fence-adapter)
	}
	src := "./examples/plugins/" + name
	if _, err := os.Stat(filepath.Join(RepoRoot(), TestModules, name)); err == nil {
		src = "./" + TestModules + "/" + name
	}
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
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, src)
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

var (
	asOnce  sync.Once
	asSkip  string           // why the AS modules cannot be built here ("" if they can)
	asErr   error            // a failure to set up the compiler
	asBuilt map[string]error // module name -> its compile error
	asOut   string
)

// asWasm returns examples/plugins/NAME (an AssemblyScript guest) compiled
// with abi/guest-as's compiler and asconfig.json. The first call compiles
// every AS example at once, in parallel (the compiler's start-up is most of
// its ~3 s), after `npm ci` in abi/guest-as when the compiler is not
// installed; without npm either, the test is skipped.
func asWasm(t testing.TB, name string) []byte {
	t.Helper()
	asOnce.Do(buildASModules)
	if asSkip != "" {
		t.Skip(asSkip)
	}
	if asErr != nil {
		t.Fatal(asErr)
	}
	err, ok := asBuilt[name]
	if !ok {
		t.Fatalf("examples/plugins/%s has no assembly/index.ts", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(asOut, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func buildASModules() {
	root := RepoRoot()
	sdk := filepath.Join(root, "abi", "guest-as")
	asc := filepath.Join(sdk, "node_modules", ".bin", "asc")
	if _, err := os.Stat(asc); err != nil {
		if _, err := exec.LookPath("npm"); err != nil {
			asSkip = fmt.Sprintf("AssemblyScript compiler not installed and npm not found: %v", err)
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = sdk
		if b, err := cmd.CombinedOutput(); err != nil {
			asErr = fmt.Errorf("npm ci in %s: %v\n%s", sdk, err, b)
			return
		}
	}
	if asOut, asErr = os.MkdirTemp("", "volhost-as-modules-"); asErr != nil {
		return
	}
	entries, err := filepath.Glob(filepath.Join(root, "examples", "plugins", "*", "assembly", "index.ts"))
	if err != nil {
		asErr = err
		return
	}
	testEntries, err := filepath.Glob(filepath.Join(root, TestModules, "*", "assembly", "index.ts"))
	if err != nil {
		asErr = err
		return
	}
	entries = append(entries, testEntries...)
	asBuilt = make(map[string]error, len(entries))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, entry := range entries {
		name := filepath.Base(filepath.Dir(filepath.Dir(entry)))
		wg.Go(func() {
			cmd := exec.Command(asc, entry, "--config", filepath.Join(sdk, "asconfig.json"), "-o", filepath.Join(asOut, name+".wasm"))
			cmd.Dir = root
			var err error
			if b, cerr := cmd.CombinedOutput(); cerr != nil {
				err = fmt.Errorf("compiling %s: %v\n%s", name, cerr, b)
			}
			mu.Lock()
			asBuilt[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
}
