package kit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volhost/volhost/plugins/pluginstest"
)

// TestScaffoldBuildsAndPasses: module new's folder, Go and AssemblyScript,
// outside a checkout, builds with its own Makefile and passes its cases.
func TestScaffoldBuildsAndPasses(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	root := pluginstest.RepoRoot()
	for _, lang := range []string{LangGo, LangAS} {
		t.Run(lang, func(t *testing.T) {
			if lang == LangAS {
				// Installs the SDK's compiler (npm ci) if it is missing,
				// or skips where npm is not there.
				pluginstest.Wasm(t, "as-default-policy")
			}
			name := "new-" + lang
			folder, err := Scaffold(NewOptions{Lang: lang, Name: name, Dir: t.TempDir(), SDK: root})
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("make", "build")
			cmd.Dir = folder
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("make build in the new %s module: %v\n%s", lang, err, out)
			}
			cases, err := LoadCases(filepath.Join(folder, "cases"))
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(context.Background(), filepath.Join(folder, name+".wasm"), LoadOptions{CacheDir: cacheDir})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			rep, err := Test(context.Background(), m, cases, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || rep.Passed != 3 {
				var b strings.Builder
				rep.WriteText(&b)
				t.Fatalf("the new %s module's cases:\n%s", lang, b.String())
			}
		})
	}
}

func TestScaffoldErrors(t *testing.T) {
	root := pluginstest.RepoRoot()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    NewOptions
		want string
	}{
		{NewOptions{Lang: "rust", Name: "x", Dir: dir, SDK: root}, `-lang must be one of go (Go guest, abi/guest), as (AssemblyScript, abi/guest-as), got "rust"`},
		{NewOptions{Lang: LangGo, Name: "Bad_Name", Dir: dir, SDK: root}, `module name "Bad_Name"`},
		{NewOptions{Lang: LangGo, Name: "taken", Dir: dir, SDK: root}, "already exists"},
		{NewOptions{Lang: LangGo, Name: "x", Dir: dir}, "pass -sdk DIR"},
		{NewOptions{Lang: LangGo, Name: "x", Dir: dir, SDK: dir}, "is not a volhost checkout"},
	} {
		if _, err := Scaffold(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Scaffold(%+v): %v, want %q", tc.o, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Fatal("a refused scaffold left a folder behind")
	}
}

// TestScaffoldInCheckout: inside a checkout a Go module needs no go.mod of
// its own (the checkout's builds it, as scripts/build-plugins.sh does for
// examples/plugins).
func TestScaffoldInCheckout(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module github.com/volhost/volhost\n\ngo 1.26.0\n"), 0o644)
	folder, err := Scaffold(NewOptions{Lang: LangGo, Name: "inside", Dir: filepath.Join(dir)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(folder, "go.mod")); err == nil {
		t.Fatal("a module inside a checkout got its own go.mod")
	}
	mk, _ := os.ReadFile(filepath.Join(folder, "Makefile"))
	if strings.Contains(string(mk), "go mod tidy") {
		t.Fatalf("Makefile inside a checkout tidies:\n%s", mk)
	}
}
