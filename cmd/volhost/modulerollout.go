package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/volhost/volhost/plugins"
)

// Rollout commands (issue 15): they act on the agent asked, like reload.

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
  agreement. module promote NAME makes it serve.

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
	c.Ui.Output(fmt.Sprintf("Module %s: generation %d (version %s) shadows generation %d (version %s)",
		st.Name, st.Shadow.Generation, orDash(st.Shadow.Version), st.Generation, orDash(st.Version)))
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
  max_faults, window }, default 3 faults within 1m) or its circuit opens.`, false)
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
	rest, err := c.parse(fs, args, 1, 1, "module "+verb+" [options] NAME")
	if err != nil {
		return c.fail(err)
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	var st *plugins.Status
	if verb == "promote" {
		st, err = cl.PromoteModule(ctx, rest[0])
	} else {
		st, err = cl.RollbackModule(ctx, rest[0])
	}
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Module %s %s: generation %d (version %s) serves", st.Name, done, st.Generation, orDash(st.Version)))
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
