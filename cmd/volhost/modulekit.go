package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/volhost/volhost/plugins/kit"
)

// Module author commands: they run offline, with no agent.

// kitCacheDir is the compilation cache of the offline commands: the one
// tests and `make` share, else the agent's default under the user's cache.
func (m *Meta) kitCacheDir() string {
	if m.Env != nil {
		if d := m.Env("VOLHOST_WAZERO_CACHE"); d != "" {
			return d
		}
	}
	if d := os.Getenv("VOLHOST_WAZERO_CACHE"); d != "" {
		return d
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "volhost", "module-cache")
	}
	return ""
}

// offlineFlags is a flag set without the agent flags: these commands never
// reach an agent.
func offlineFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(discard{})
	fs.Usage = func() {}
	return fs
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

func offlineParse(fs *flag.FlagSet, args []string, minArgs, maxArgs int, usage string) ([]string, error) {
	return (&Meta{}).parse(fs, args, minArgs, maxArgs, usage)
}

// ModuleRunCommand is `volhost module run MODULE.wasm -view FILE`.
type ModuleRunCommand struct{ *Meta }

func (c *ModuleRunCommand) Synopsis() string { return "Run a module on one recorded view, offline" }
func (c *ModuleRunCommand) Help() string {
	return strings.TrimRight(`Usage: volhost module run [options] MODULE.wasm

  Load MODULE.wasm with its manifest the way the agent does (the same
  validation, instrumentation and limits), ask it about one view and print
  its answer (decision, adapter request or classification), the call time
  and the memory its instance uses. The host's checks are applied to the
  answer: one the watcher would refuse (a release of a running allocation,
  a stranger's disk or node) is shown as the fault it would record, and the
  command exits 1. No agent is needed.

  A view file is a case file (module test) or just its "view" object, as
  written by module record.

Options:

  -view=<file>
    The view to send (required).

  -manifest=<file>
    The module's manifest. Default: NAME.hcl beside MODULE.wasm.

  -json
    Print the result as JSON.
`, "\n")
}

func (c *ModuleRunCommand) Run(args []string) int {
	fs := offlineFlags("module run")
	view := fs.String("view", "", "")
	manifest := fs.String("manifest", "", "")
	asJSON := fs.Bool("json", false, "")
	rest, err := offlineParse(fs, args, 1, 1, "module run [options] MODULE.wasm")
	if err != nil {
		return c.fail(err)
	}
	if *view == "" {
		return c.fail(errors.New("-view FILE is required (usage: volhost module run -view FILE MODULE.wasm)"))
	}
	v, err := readView(*view)
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	mod, err := kit.Load(ctx, rest[0], kit.LoadOptions{Manifest: *manifest, CacheDir: c.kitCacheDir()})
	if err != nil {
		return c.fail(err)
	}
	defer mod.Close()
	res, err := mod.Run(ctx, v)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		c.printJSON(res)
	} else {
		var b bytes.Buffer
		kit.FormatResult(&b, res)
		c.Ui.Output(strings.TrimRight(b.String(), "\n"))
	}
	if res.Fault != nil {
		return 1
	}
	return 0
}

// readView reads a view file: a case file, or a bare view object.
func readView(path string) (*kit.View, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("view: %w", err)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("view %s: %w", path, err)
	}
	if _, ok := probe["view"]; ok {
		var c struct {
			View json.RawMessage `json:"view"`
		}
		_ = json.Unmarshal(b, &c)
		b = c.View
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v kit.View
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("view %s: %w", path, err)
	}
	if _, err := v.Call(); err != nil {
		return nil, fmt.Errorf("view %s: %w", path, err)
	}
	return &v, nil
}

// ModuleTestCommand is `volhost module test DIR`.
type ModuleTestCommand struct{ *Meta }

func (c *ModuleTestCommand) Synopsis() string { return "Run a module's case files, offline" }
func (c *ModuleTestCommand) Help() string {
	return strings.TrimRight(`Usage: volhost module test [options] DIR

  Run every case file (*.json) of DIR against a module, like opa test: a
  case holds a view and the answer expected for it ("expect", matched
  partially: fields it leaves out are not compared) or the fault expected
  ("expect_fault": trap, timeout, unsafe, bad-output, guest-error...). Each
  case prints PASS or FAIL, a failure with a diff of what differs, and the
  command exits 1 when any case fails or a case file is malformed.

  DIR is a cases folder or a module folder holding cases/. The module is
  -module, else the one NAME.wasm in the module folder (where module new's
  build puts it), with its manifest NAME.hcl beside it or in the folder.

Options:

  -module=<file>
    The module to test.

  -manifest=<file>
    Its manifest. Default: NAME.hcl beside the module, else in the folder.

  -run=<regexp>
    Run only the cases whose name matches.

  -json
    Print the report as JSON.
`, "\n")
}

func (c *ModuleTestCommand) Run(args []string) int {
	fs := offlineFlags("module test")
	module := fs.String("module", "", "")
	manifest := fs.String("manifest", "", "")
	runExpr := fs.String("run", "", "")
	asJSON := fs.Bool("json", false, "")
	rest, err := offlineParse(fs, args, 1, 1, "module test [options] DIR")
	if err != nil {
		return c.fail(err)
	}
	var filter *regexp.Regexp
	if *runExpr != "" {
		if filter, err = regexp.Compile(*runExpr); err != nil {
			return c.fail(fmt.Errorf("-run: %w", err))
		}
	}
	casesDir, folder := rest[0], rest[0]
	if fi, err := os.Stat(filepath.Join(rest[0], "cases")); err == nil && fi.IsDir() {
		casesDir = filepath.Join(rest[0], "cases")
	} else {
		folder = filepath.Dir(filepath.Clean(rest[0]))
	}
	cases, err := kit.LoadCases(casesDir)
	if err != nil {
		return c.fail(err)
	}
	wasm := *module
	if wasm == "" {
		if wasm, err = findModule(folder); err != nil {
			return c.fail(err)
		}
	}
	man := *manifest
	if man == "" {
		name := strings.TrimSuffix(filepath.Base(wasm), ".wasm")
		if _, err := os.Stat(filepath.Join(filepath.Dir(wasm), name+".hcl")); err != nil {
			man = filepath.Join(folder, name+".hcl")
		}
	}
	ctx, stop := c.context()
	defer stop()
	mod, err := kit.Load(ctx, wasm, kit.LoadOptions{Manifest: man, CacheDir: c.kitCacheDir()})
	if err != nil {
		return c.fail(err)
	}
	defer mod.Close()
	rep, err := kit.Test(ctx, mod, cases, filter)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		c.printJSON(rep)
	} else {
		var b bytes.Buffer
		rep.WriteText(&b)
		c.Ui.Output(strings.TrimRight(b.String(), "\n"))
	}
	if rep.Passed == 0 && rep.Failed == 0 {
		return c.fail(fmt.Errorf("no case matches -run %q", *runExpr))
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// findModule finds the one NAME.wasm of a module folder.
func findModule(folder string) (string, error) {
	found, _ := filepath.Glob(filepath.Join(folder, "*.wasm"))
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("no NAME.wasm in %s: build the module first, or pass -module FILE", folder)
	}
	return "", fmt.Errorf("%d modules in %s (%s): pass -module FILE", len(found), folder, strings.Join(found, ", "))
}

// ModuleNewCommand is `volhost module new -lang go|as NAME`.
type ModuleNewCommand struct{ *Meta }

func (c *ModuleNewCommand) Synopsis() string { return "Scaffold a new release-policy module" }
func (c *ModuleNewCommand) Help() string {
	return strings.TrimRight(`Usage: volhost module new [options] NAME

  Create the folder NAME holding a release-policy module that builds and
  passes its own cases out of the box: source (Go with abi/guest, or
  AssemblyScript with abi/guest-as), manifest NAME.hcl, cases/ for module
  test, a README and a Makefile (make builds NAME.wasm, make test runs
  volhost module test .). An existing folder is never overwritten.

Options:

  -lang=<go|as>
    The guest language (required).

  -dir=<dir>
    Where to create the folder. Default: the current directory.

  -sdk=<dir>
    A volhost checkout holding the guest SDKs. Default: the checkout the
    new folder is inside. A Go module outside a checkout gets its own
    go.mod pointing at -sdk.
`, "\n")
}

func (c *ModuleNewCommand) Run(args []string) int {
	fs := offlineFlags("module new")
	lang := fs.String("lang", "", "")
	dir := fs.String("dir", "", "")
	sdk := fs.String("sdk", "", "")
	rest, err := offlineParse(fs, args, 1, 1, "module new -lang go|as [options] NAME")
	if err != nil {
		return c.fail(err)
	}
	if *lang == "" {
		return c.fail(errors.New("-lang go|as is required (usage: volhost module new -lang go|as NAME)"))
	}
	// The Makefile's test target runs this binary, so `make test` works
	// before volhost is installed on PATH (it exited 127).
	self, _ := os.Executable()
	folder, err := kit.Scaffold(kit.NewOptions{Lang: *lang, Name: rest[0], Dir: *dir, SDK: *sdk, Volhost: self})
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Created %s (%s release policy): cd there, then make && make test", folder, *lang))
	return 0
}

// ModuleRecordCommand is `volhost module record VOLUME [-step STEP]`.
type ModuleRecordCommand struct{ *Meta }

func (c *ModuleRecordCommand) Synopsis() string {
	return "Record the view a module would get for a volume now"
}
func (c *ModuleRecordCommand) Help() string {
	return helpText("module record [options] VOLUME", `
  Ask the agent for the exact view its watcher would hand a module about
  VOLUME now (built by the watcher's own code from the agent's state) and
  write it as a case file: the release policy's view, or with -step the CSI
  adapter's view of one claim at that step. Secrets are redacted. Replay it
  with module run -view FILE; add "expect" (or "expect_fault") to make it a
  case for module test.

Options:

  -namespace=<ns>
    The volume's namespace. Default: default.

  -step=<step>
    policy (default), node-unpublish, node-unstage, controller-unpublish or
    controller-publish.

  -alloc=<id>
    The claim of an adapter view. Default: the first claim by allocation ID.

  -o=<file>
    Write the case file there instead of standard output (never over an
    existing file).`, false)
}

func (c *ModuleRecordCommand) Run(args []string) int {
	fs := c.flagSet("module record", false)
	ns := c.namespaceFlag(fs, "")
	step := fs.String("step", "", "")
	alloc := fs.String("alloc", "", "")
	out := fs.String("o", "", "")
	rest, cl, ctx, stop, err := c.begin(fs, args, 1, 1, "module record [options] VOLUME")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	rec, err := cl.ModuleView(ctx, *ns, rest[0], *step, *alloc)
	if err != nil {
		return c.fail(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "<redacted>" stays readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(rec); err != nil {
		return c.fail(err)
	}
	b := bytes.TrimRight(buf.Bytes(), "\n")
	if *out == "" {
		c.Ui.Output(string(b))
		return 0
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return c.fail(fmt.Errorf("case file: %w", err))
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c.fail(fmt.Errorf("case file: %w", err))
	}
	c.Ui.Output(fmt.Sprintf("Wrote %s; add \"expect\" to make it a case for module test", *out))
	return 0
}
