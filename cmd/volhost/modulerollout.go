package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
	"github.com/volhost/volhost/plugins/source"
)

// Rollout commands: they act on the agent asked, like reload.

// ModuleShadowCommand is `volhost module shadow NAME FILE`.
type ModuleShadowCommand struct{ *Meta }

func (c *ModuleShadowCommand) Synopsis() string {
	return "Run a candidate module beside the serving one, never acting"
}
func (c *ModuleShadowCommand) Help() string {
	return helpText("module shadow [options] NAME FILE.wasm", `
  Upload FILE.wasm as the shadow candidate of module NAME on the agent: it
  is validated like any new version, then answers every request NAME gets,
  beside the serving generation, and never acts. Each disagreement is an
  event with both answers and counts in
  volhost_module_shadow_disagreements_total; module status shows the
  agreement. module promote NAME makes it serve; module discard NAME drops
  it. Where the candidate's manifest differs from the serving one
  (selection, version, limits, on_failure), the differences are listed.

  The same happens for files in the module directory whose manifest says
  mode = "shadow". An uploaded candidate is this agent's state: an agent
  restart forgets it (put the files in the module directory to keep them).

Options:

  -manifest=<file>
    The candidate's manifest. Default: the serving generation's (without
    its sha256 pin).`, false)
}

func (c *ModuleShadowCommand) Run(args []string) int {
	fs := c.flagSet("module shadow", false)
	manifestFile := fs.String("manifest", "", "")
	rest, err := c.parse(fs, args, 2, 2, "module shadow [options] NAME FILE.wasm")
	if err != nil {
		return c.fail(err)
	}
	wasm, err := os.ReadFile(rest[1])
	if err != nil {
		return c.fail(fmt.Errorf("module: %w", err))
	}
	var manifest *string
	if *manifestFile != "" {
		b, err := os.ReadFile(*manifestFile)
		if err != nil {
			return c.fail(fmt.Errorf("manifest: %w", err))
		}
		s := string(b)
		manifest = &s
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	st, err := cl.ShadowModule(ctx, rest[0], wasm, manifest)
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Module %q: generation %d (version %s) shadows generation %d (version %s)",
		st.Name, st.Shadow.Generation, orDash(st.Shadow.Version), st.Generation, orDash(st.Version)))
	if changes := st.Shadow.ManifestChanges; len(changes) > 0 {
		c.Ui.Output("\nIts manifest differs from the serving one:")
		for _, ch := range changes {
			line := "  " + ch.String()
			if ch.Selection {
				line += "   (selection: module promote refuses it without -allow-selection-change)"
			}
			c.Ui.Output(line)
		}
	}
	return 0
}

// ModuleDiscardCommand is `volhost module discard NAME`.
type ModuleDiscardCommand struct{ *Meta }

func (c *ModuleDiscardCommand) Synopsis() string { return "Drop a module's shadow candidate" }
func (c *ModuleDiscardCommand) Help() string {
	return helpText("module discard [options] NAME", `
  Drop module NAME's shadow candidate on the agent: it stops answering and
  is unloaded; the serving generation is untouched. A candidate loaded
  from the module directory (mode = "shadow") is not loaded again from the
  same files by a reload; new files load as usual.`, false)
}

func (c *ModuleDiscardCommand) Run(args []string) int {
	fs := c.flagSet("module discard", false)
	rest, cl, ctx, stop, err := c.begin(fs, args, 1, 1, "module discard [options] NAME")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	st, err := cl.DiscardShadow(ctx, rest[0])
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Module %q: shadow candidate discarded; generation %d (version %s) serves", st.Name, st.Generation, orDash(st.Version)))
	return 0
}

// ModulePromoteCommand is `volhost module promote NAME`.
type ModulePromoteCommand struct{ *Meta }

func (c *ModulePromoteCommand) Synopsis() string { return "Make a module's shadow candidate serve" }
func (c *ModulePromoteCommand) Help() string {
	return helpText("module promote [options] NAME", `
  Make module NAME's shadow candidate serve on the agent. The generation it
  replaces stays loaded as the last known good: module rollback NAME
  returns to it, and so does the agent by itself when the promoted
  generation faults past its manifest's rollback limit (rollback {
  max_faults, window }, default 3 faults within 1m) or its circuit opens.

  A candidate whose manifest selects other volumes than the serving one
  (default, plugin_ids, volumes: module shadow and module status show the
  difference) is refused, naming the change, unless you allow it.

Options:

  -allow-selection-change
    Promote even though the candidate's manifest changes which volumes
    the module judges.`, false)
}

func (c *ModulePromoteCommand) Run(args []string) int {
	return c.rollout(args, "promote", "promoted")
}

// ModuleRollbackCommand is `volhost module rollback NAME`.
type ModuleRollbackCommand struct{ *Meta }

func (c *ModuleRollbackCommand) Synopsis() string {
	return "Return a module to its last known good generation"
}
func (c *ModuleRollbackCommand) Help() string {
	return helpText("module rollback [options] NAME", `
  Return module NAME to its last known good generation on the agent (the
  one a promote replaced, or with on_failure = "last_known_good" the one a
  swap replaced). The generation rolled back from is not loaded again from
  the same files.`, false)
}

func (c *ModuleRollbackCommand) Run(args []string) int {
	return (&ModulePromoteCommand{c.Meta}).rollout(args, "rollback", "rolled back")
}

func (c *ModulePromoteCommand) rollout(args []string, verb, done string) int {
	fs := c.flagSet("module "+verb, false)
	var allow *bool
	if verb == "promote" {
		allow = fs.Bool("allow-selection-change", false, "")
	}
	rest, cl, ctx, stop, err := c.begin(fs, args, 1, 1, "module "+verb+" [options] NAME")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	var st *plugins.Status
	if verb == "promote" {
		st, err = cl.PromoteModule(ctx, rest[0], plugins.PromoteOptions{AllowSelectionChange: *allow})
		if errors.Is(err, structs.ErrConflict) && strings.Contains(err.Error(), plugins.ErrSelectionChange.Error()) {
			// The agent's refusal, in the CLI's terms.
			err = fmt.Errorf("%w; promote with -allow-selection-change if that is meant", err)
		}
	} else {
		st, err = cl.RollbackModule(ctx, rest[0])
	}
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Module %q %s: generation %d (version %s) serves", st.Name, done, st.Generation, orDash(st.Version)))
	return 0
}

// rolloutRows are module status's rollout lines.
func rolloutRows(s plugins.Status) [][2]string {
	lkg := "-"
	if g := s.LastKnownGood; g != nil {
		lkg = fmt.Sprintf("generation %d (version %s)", g.Generation, orDash(g.Version))
	}
	shadow := "-"
	if sh := s.Shadow; sh != nil {
		shadow = fmt.Sprintf("generation %d (version %s): %.1f%% agreement over %d calls, %d disagreements",
			sh.Generation, orDash(sh.Version), sh.AgreementPercent, sh.Calls, sh.Disagreements)
		if sh.Calls == 0 {
			// "100.0% agreement over 0 calls" claimed an agreement
			// nobody had measured.
			shadow = fmt.Sprintf("generation %d (version %s): no calls yet", sh.Generation, orDash(sh.Version))
		}
	}
	rows := [][2]string{
		{"On Failure", orDash(s.OnFailure)},
		{"Promoted", fmt.Sprint(s.Promoted)},
		{"Last Known Good", lkg},
		{"Shadow", shadow},
	}
	if sh := s.Shadow; sh != nil && sh.LastDisagreement != "" {
		rows = append(rows, [2]string{"Last Disagreement", oneLine(sh.LastDisagreement)})
	}
	if sh := s.Shadow; sh != nil {
		for i, ch := range sh.ManifestChanges {
			key := ""
			if i == 0 {
				key = "Shadow Manifest"
			}
			line := ch.String()
			if ch.Selection {
				line += " (selection)"
			}
			rows = append(rows, [2]string{key, line})
		}
	}
	if len(s.RecentFaults) == 0 {
		return append(rows, [2]string{"Recent Faults", "-"})
	}
	for i, f := range s.RecentFaults {
		key := ""
		if i == 0 {
			key = "Recent Faults"
		}
		rows = append(rows, [2]string{key, fmt.Sprintf("%s gen %d %s: %s", f.Time.UTC().Format(time.RFC3339), f.Generation, f.Kind, truncate(oneLine(f.Message), 160))})
	}
	return rows
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimSpace(s[:n]) + "..."
}

// ModulePushCommand is `volhost module push MODULE.wasm REF`.
type ModulePushCommand struct{ *Meta }

func (c *ModulePushCommand) Synopsis() string { return "Push a module to an OCI registry" }
func (c *ModulePushCommand) Help() string {
	return strings.TrimRight(`Usage: volhost module push [options] MODULE.wasm REF

  Push MODULE.wasm and its manifest to the OCI registry reference REF
  (registry/repo:tag) as an artifact of two layers. The manifest pins the
  wasm's sha256 (added when it has no pin), so the pair swaps in as one.
  Sign it next with volhost module sign; an agent with a module_source
  block for the tag pulls only signed bundles. Registry credentials are
  not supported: the registry must accept anonymous pushes (or run on
  loopback, where plain HTTP is used).

Options:

  -manifest=<file>
    The manifest. Default: NAME.hcl beside MODULE.wasm.
`, "\n")
}

func (c *ModulePushCommand) Run(args []string) int {
	fs := offlineFlags("module push")
	manifestFile := fs.String("manifest", "", "")
	rest, err := offlineParse(fs, args, 2, 2, "module push [options] MODULE.wasm REF")
	if err != nil {
		return c.fail(err)
	}
	name, ok := strings.CutSuffix(filepath.Base(rest[0]), ".wasm")
	if !ok || name == "" {
		return c.fail(fmt.Errorf("%s: a module file is NAME.wasm", rest[0]))
	}
	if *manifestFile == "" {
		*manifestFile = filepath.Join(filepath.Dir(rest[0]), name+".hcl")
	}
	wasm, err := os.ReadFile(rest[0])
	if err != nil {
		return c.fail(fmt.Errorf("module: %w", err))
	}
	man, err := os.ReadFile(*manifestFile)
	if err != nil {
		return c.fail(fmt.Errorf("manifest: %w", err))
	}
	if man, err = source.Pin(name, wasm, man); err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	d, err := source.Push(ctx, rest[1], source.Bundle{Wasm: wasm, Manifest: man})
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Pushed %s as %s (digest %s)", name, rest[1], d))
	return 0
}

// ModuleSignCommand is `volhost module sign -key FILE REF`.
type ModuleSignCommand struct{ *Meta }

func (c *ModuleSignCommand) Synopsis() string { return "Sign a pushed module bundle" }
func (c *ModuleSignCommand) Help() string {
	return strings.TrimRight(`Usage: volhost module sign -key FILE REF

  Sign the bundle REF names now (its manifest digest) in cosign's
  key-based format: an ECDSA P-256 signature over the simple-signing
  payload, pushed as the sha256-<hex>.sig tag with the
  dev.cosignproject.cosign/signature annotation (cosign verify --key
  checks it; no transparency log is used). The key is an unencrypted
  PKCS#8 PEM P-256 key; cosign's encrypted key files are not read:

    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out module.key
    openssl pkey -in module.key -pubout -out module.pub   # public_key of module_source

Options:

  -key=<file>
    The private key (required).
`, "\n")
}

func (c *ModuleSignCommand) Run(args []string) int {
	fs := offlineFlags("module sign")
	keyFile := fs.String("key", "", "")
	rest, err := offlineParse(fs, args, 1, 1, "module sign -key FILE REF")
	if err != nil {
		return c.fail(err)
	}
	if *keyFile == "" {
		return c.fail(errors.New("-key FILE is required (usage: volhost module sign -key FILE REF)"))
	}
	pemBytes, err := os.ReadFile(*keyFile)
	if err != nil {
		return c.fail(fmt.Errorf("key: %w", err))
	}
	key, err := source.ParsePrivateKey(pemBytes)
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	d, err := source.Sign(ctx, rest[0], key)
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Signed %s (digest %s)", rest[0], d))
	return 0
}
