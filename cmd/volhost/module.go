package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/plugins"
)

// ModuleListCommand is `volhost module list`.
type ModuleListCommand struct{ *Meta }

func (c *ModuleListCommand) Synopsis() string { return "List the agent's Wasm modules" }
func (c *ModuleListCommand) Help() string {
	return helpText("module list [options]", `
  List the release-policy and CSI-adapter modules loaded from the agent's
  module directory, with their state (loading, serving, refused,
  open-circuit, retired), version, generation and call counts. An agent
  compiles its modules after it starts listening: until then they are
  loading, and the leader releases nothing. Modules are loaded by each
  server from its own directory: this asks the agent at -address.`, true)
}

func (c *ModuleListCommand) Run(args []string) int {
	fs := c.flagSet("module list", true)
	_, cl, ctx, stop, err := c.begin(fs, args, 0, 0, "module list [options]")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	mods, err := cl.Modules(ctx)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(mods)
	}
	c.Ui.Output(moduleTable(mods))
	return 0
}

func moduleTable(mods []plugins.Status) string {
	if len(mods) == 0 {
		return "No modules (start the agent with -module-dir to load some)"
	}
	rows := [][]string{{"Name", "Kind", "State", "Version", "Generation", "Calls", "Faults", "Refusal"}}
	for _, m := range mods {
		rows = append(rows, []string{m.Name, orDash(m.Kind), m.State, orDash(m.Version), fmt.Sprint(m.Generation),
			fmt.Sprint(m.Calls), faultSummary(m.Faults), orDash(oneLine(m.Refusal))})
	}
	return table(rows)
}

func faultSummary(f map[string]uint64) string {
	if len(f) == 0 {
		return "-"
	}
	kinds := slices.Sorted(maps.Keys(f))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, f[k]))
	}
	return strings.Join(parts, ",")
}

// ModuleStatusCommand is `volhost module status NAME`.
type ModuleStatusCommand struct{ *Meta }

func (c *ModuleStatusCommand) Synopsis() string { return "Show one Wasm module in detail" }
func (c *ModuleStatusCommand) Help() string {
	return helpText("module status [options] NAME", `
  Show a module's runtime status (state, why a new version was refused,
  calls, faults by kind, latency percentiles, pool, memory) and which
  registered volumes and CSI plugins it serves now: how many, and the first
  of them in ID order (-volumes N, default 20; -json lists up to the
  server's max_per_page). The server reads this through its indexes, not
  by matching every volume.

  Timeouts says how a call is stopped at its call_timeout: "instrumented"
  (the host added a cheap check to the module at load). A module the host
  cannot instrument is refused, and the refusal says why.`, true)
}

func (c *ModuleStatusCommand) Run(args []string) int {
	fs := c.flagSet("module status", true)
	shown := fs.Int("volumes", 20, "list at most this many of the served volumes")
	rest, cl, ctx, stop, err := c.begin(fs, args, 1, 1, "module status [options] NAME")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	if *shown <= 0 {
		return c.fail(fmt.Errorf("-volumes must be a positive number, got %d", *shown))
	}
	perPage := *shown
	if c.json {
		perPage = 0 // the server's page size
	}
	info, err := cl.ModuleServing(ctx, rest[0], perPage)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(info)
	}
	vols := make([]string, 0, len(info.ServedVolumes))
	for _, v := range info.ServedVolumes {
		vols = append(vols, v.Namespace+"/"+v.ID)
	}
	serves := strings.Join(vols, ", ")
	if info.ServedVolumesTruncated {
		serves = fmt.Sprintf("%d volumes; the first %d: %s", info.ServedVolumeCount, len(vols), serves)
	}
	selectors := append(append([]string(nil), info.PluginIDs...), info.Volumes...)
	if info.Default {
		selectors = append(selectors, "default")
	}
	// An adapter is asked only about the steps it declared (ABI.md section
	// 4); saying which tells an operator why a step never reaches it.
	adapts := "-"
	if info.Kind == string(abi.KindCSIAdapter) {
		adapts = "every step"
		if len(info.AdaptSteps) > 0 {
			adapts = strings.Join(info.AdaptSteps, ", ")
		}
	}
	c.Ui.Output(kv(append([][2]string{
		{"Name", info.Name},
		{"Kind", info.Kind},
		{"State", info.State},
		{"Refusal", orDash(oneLine(info.Refusal))},
		{"Version", versionText(info.Version, info.ReportedVersion)},
		{"SHA256", orDash(info.SHA256)},
		{"Generation", fmt.Sprint(info.Generation)},
		{"Selects", orDash(strings.Join(selectors, ", "))},
		{"Serves Volumes", orDash(serves)},
		{"Serves Plugins", orDash(strings.Join(info.ServedPlugins, ", "))},
		{"Adapts Steps", adapts},
		{"ABI", abiText(info.ABI, info.OptionalExports)},
		{"Timeouts", orDash(info.Timeouts)},
		{"Calls", fmt.Sprint(info.Calls)},
		{"Faults", faultSummary(info.Faults)},
		{"Latency p50/p99", fmt.Sprintf("%s / %s", info.P50.Round(time.Microsecond), info.P99.Round(time.Microsecond))},
		{"Pool (idle/size)", fmt.Sprintf("%d/%d", info.PoolIdle, info.PoolSize)},
		{"Memory Pages", fmt.Sprintf("%d of %d", info.MemoryPages, info.MemoryLimitPages)},
		{"Table Limit", orDash(tableLimit(info.TableLimit))},
		{"Breaker", breakerText(info.BreakerOpen)},
	}, rolloutRows(info.Status)...)))
	return 0
}

// ModuleReloadCommand is `volhost module reload`.
type ModuleReloadCommand struct{ *Meta }

func (c *ModuleReloadCommand) Synopsis() string { return "Reload the agent's module directory now" }
func (c *ModuleReloadCommand) Help() string {
	return helpText("module reload [options]", `
  Rescan the agent's module directory now (the agent also watches it and
  reloads on SIGHUP). A changed module is compiled and validated beside the
  serving one and swapped in only when valid; a refused version leaves the
  last good one serving, with the reason shown here and in module status.`, false)
}

func (c *ModuleReloadCommand) Run(args []string) int {
	fs := c.flagSet("module reload", false)
	_, cl, ctx, stop, err := c.begin(fs, args, 0, 0, "module reload [options]")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	mods, err := cl.ReloadModules(ctx)
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(moduleTable(mods))
	return 0
}

// tableLimit renders limits.table_elements ("" when not serving).
func tableLimit(n uint32) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d elements", n)
}

func breakerText(open bool) string {
	if open {
		return "open (calls refused until the cool-down's trial call)"
	}
	return "closed"
}

// abiText is the ABI version a module's exports add up to and its
// optional exports (ABI.md section 10): an adapter without
// volhost_confirm_fence is never asked to confirm a fence.
func abiText(version string, optional []string) string {
	if version == "" {
		return "-"
	}
	if len(optional) == 0 {
		return version
	}
	return version + " (" + strings.Join(optional, ", ") + ")"
}

// versionText is a module's version: the manifest's, and the module's own
// when it reports another (a stale manifest, or the wrong build).
func versionText(manifest, reported string) string {
	if reported == "" {
		return orDash(manifest)
	}
	return fmt.Sprintf("%s (from the manifest; the module itself reports %s)", orDash(manifest), reported)
}
