package kit

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
)

//go:embed all:scaffold
var scaffolds embed.FS

// Languages module new scaffolds.
const (
	LangGo = "go"
	LangAS = "as"
)

// NewOptions configure Scaffold.
type NewOptions struct {
	// Lang is LangGo or LangAS.
	Lang string
	// Name is the module's name: its folder, NAME.wasm and NAME.hcl.
	Name string
	// Dir is where the module folder is created ("" for the current one).
	Dir string
	// SDK is a volhost checkout holding the guest SDKs (abi/guest,
	// abi/guest-as). "" looks for one above the new folder; a Go module
	// folder outside a checkout gets its own go.mod pointing at SDK.
	SDK string
	// Volhost is the volhost binary the Makefile's test target runs by
	// default (the one running module new); "" for volhost on PATH.
	Volhost string
}

// validName is a module name the module directory accepts and a Go module
// path, a Makefile and a file name can all carry.
var validName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// Scaffold writes a new module folder: source, manifest, cases, README and
// a Makefile whose build target compiles it and whose test target runs its
// cases. It returns the folder. An existing folder is never overwritten.
func Scaffold(o NewOptions) (string, error) {
	if o.Lang != LangGo && o.Lang != LangAS {
		return "", fmt.Errorf("-lang must be one of %s (Go guest, abi/guest), %s (AssemblyScript, abi/guest-as), got %q", LangGo, LangAS, o.Lang)
	}
	if !validName.MatchString(o.Name) {
		return "", fmt.Errorf("module name %q: want lower-case letters, digits and dashes, starting with a letter (it names NAME.wasm and NAME.hcl)", o.Name)
	}
	parent, err := filepath.Abs(cmpOr(o.Dir, "."))
	if err != nil {
		return "", err
	}
	folder := filepath.Join(parent, o.Name)
	if _, err := os.Lstat(folder); err == nil {
		return "", fmt.Errorf("%s already exists: module new never overwrites", folder)
	}
	inRepo := findCheckout(parent)
	sdk := o.SDK
	if sdk == "" {
		sdk = inRepo
	}
	if sdk == "" {
		return "", errors.New("no volhost checkout above the new folder: pass -sdk DIR (a volhost checkout, for the guest SDK)")
	}
	if sdk, err = filepath.Abs(sdk); err != nil {
		return "", err
	}
	if !isCheckout(sdk) {
		return "", fmt.Errorf("-sdk %s is not a volhost checkout (no go.mod of module github.com/volhost/volhost)", sdk)
	}
	asImport, err := filepath.Rel(filepath.Join(folder, "assembly"), filepath.Join(sdk, "abi", "guest-as", "assembly"))
	if err != nil {
		return "", err
	}
	data := struct {
		Name, Lang, SDK, ASImport, GoVersion, Volhost string
		GoMod                                         bool
	}{Name: o.Name, Lang: o.Lang, SDK: sdk, ASImport: filepath.ToSlash(asImport), GoVersion: goVersion(sdk),
		GoMod: o.Lang == LangGo && inRepo == "", Volhost: cmpOr(o.Volhost, "volhost")}

	root := path.Join("scaffold", o.Lang)
	type file struct {
		name string
		body []byte
	}
	var files []file
	err = fs.WalkDir(scaffolds, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, root+"/")
		if rel == "go.mod.tmpl" && !data.GoMod {
			return nil
		}
		src, err := scaffolds.ReadFile(p)
		if err != nil {
			return err
		}
		body := src
		if n, ok := strings.CutSuffix(rel, ".tmpl"); ok {
			rel = n
			t, err := template.New(rel).Parse(string(src))
			if err != nil {
				return err
			}
			var b bytes.Buffer
			if err := t.Execute(&b, data); err != nil {
				return err
			}
			body = b.Bytes()
		}
		files = append(files, file{strings.ReplaceAll(rel, "_name_", o.Name), body})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("scaffold: %w", err)
	}
	if data.GoMod {
		// The checkout's sums cover every module the SDK needs, so the
		// first build needs no download.
		if sums, err := os.ReadFile(filepath.Join(sdk, "go.sum")); err == nil {
			files = append(files, file{"go.sum", sums})
		}
	}
	for _, f := range files {
		p := filepath.Join(folder, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, f.body, 0o644); err != nil {
			return "", err
		}
	}
	return folder, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// findCheckout returns the volhost checkout dir is inside, or "".
func findCheckout(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if isCheckout(d) {
			return d
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

func isCheckout(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	return s.Scan() && strings.TrimSpace(s.Text()) == "module github.com/volhost/volhost"
}

// goVersion is the checkout's go directive.
func goVersion(sdk string) string {
	b, _ := os.ReadFile(filepath.Join(sdk, "go.mod"))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "1.26"
}
