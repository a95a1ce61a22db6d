// Command volhost is the single volhost binary: `volhost agent` runs the
// leader service, every other command is the operator CLI, which talks to
// an agent's HTTP API (-address or VOLHOST_ADDR, default
// http://127.0.0.1:4747) in the style of the reference scheduler's CLI.
// Every read takes -json; exit code 0 means success and 1 an error, reported
// as one line on stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/volhost/volhost/host/cluster"
)

// Version is the build's version, printed by `volhost version` and
// -version.
var Version = "0.2.0-dev"

// The servers advertise this binary's version to each other (the members
// map, `operator raft list-peers`, the feature gates' refusals).
func init() { cluster.BuildVersion = buildVersion() }

// buildVersion is Version with the commit the binary was built from, when
// the build recorded one.
func buildVersion() string {
	if rev := buildRevision(); rev != "" {
		return Version + "+" + rev
	}
	return Version
}

func buildRevision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return s.Value[:12]
			}
		}
	}
	return ""
}

// versionLine is what `volhost version` and -version print: the version,
// the commit the binary was built from when the build recorded one, the
// Go toolchain and platform, and the log features it understands.
func versionLine() string {
	line := "volhost v" + Version
	if rev := buildRevision(); rev != "" {
		line += " (" + rev + ")"
	}
	// The gated log features this binary understands: a cluster enables
	// each once every server lists it (operator raft list-peers).
	return line + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH +
		"\nLog features: " + strings.Join(cluster.Features(), ", ")
}

// VersionCommand prints the version (`volhost version`, as -version does).
type VersionCommand struct{ *Meta }

// Help implements cli.Command.
func (*VersionCommand) Help() string {
	return "Usage: volhost version\n\n  Print the version of this volhost binary (the same line as volhost -version)."
}

// Synopsis implements cli.Command.
func (*VersionCommand) Synopsis() string { return "Print the volhost version" }

// Run implements cli.Command.
func (c *VersionCommand) Run(args []string) int {
	if len(args) > 0 {
		return c.fail(fmt.Errorf("unexpected argument %q (usage: volhost version)", args[0]))
	}
	c.Ui.Output(versionLine())
	return 0
}

func main() {
	os.Exit(Run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// Run runs the CLI with args (without the program name), reading the
// environment through env, and returns the exit code.
func Run(args []string, env func(string) string, stdout, stderr io.Writer) int {
	return run(context.Background(), args, env, stdout, stderr)
}

// run is Run under ctx: cancelling it ends a following command.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "agent" {
		// The agent owns its flags, -help included (agent.go).
		return runAgent(args[1:], stdout, stderr)
	}
	ui := &cli.BasicUi{Writer: stdout, ErrorWriter: stderr}
	meta := &Meta{Ui: ui, Env: env, Ctx: ctx}
	commands := Commands(meta)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if _, ok := commands[args[0]]; !ok {
			// The library prints only the usage for an unknown command,
			// which reads as if the command were fine and misused.
			ui.Error("Error: " + unknownCommand("", args[0], topLevel(commands), "volhost -help"))
			return 1
		}
	}
	c := &cli.CLI{
		Name:       "volhost",
		Version:    versionLine(),
		Args:       args,
		Commands:   commands,
		HelpFunc:   cli.BasicHelpFunc("volhost"),
		HelpWriter: stdout,
		// Usage after a wrong command goes to stderr, like an error.
		ErrorWriter: stderr,
	}
	code, err := c.Run()
	if err != nil {
		ui.Error("Error: " + oneLine(err.Error()))
		return 1
	}
	if code != 0 {
		// The library answers 127 for an unknown command; volhost's
		// contract is 0 or 1.
		return 1
	}
	return 0
}

// Commands returns the command table. Module commands (`module
// list|status|reload`) and `operator raft list-peers` register here too.
func Commands(m *Meta) map[string]cli.CommandFactory {
	cmd := func(c cli.Command) cli.CommandFactory {
		return func() (cli.Command, error) { return c, nil }
	}
	return map[string]cli.CommandFactory{
		"agent":   cmd(&AgentCommand{}),
		"version": cmd(&VersionCommand{Meta: m}),

		"volume":            cmd(&groupCommand{Meta: m, name: "volume", synopsis: "Register, inspect, claim, detach and deregister CSI volumes"}),
		"volume register":   cmd(&VolumeRegisterCommand{Meta: m}),
		"volume status":     cmd(&VolumeStatusCommand{Meta: m}),
		"volume claim":      cmd(&VolumeClaimCommand{Meta: m}),
		"volume deregister": cmd(&VolumeDeregisterCommand{Meta: m}),
		"volume detach":     cmd(&VolumeDetachCommand{Meta: m}),
		"volume leftovers":  cmd(&VolumeLeftoversCommand{Meta: m}),

		"node":            cmd(&groupCommand{Meta: m, name: "node", synopsis: "Register, inspect, fence and deregister client nodes"}),
		"node register":   cmd(&NodeRegisterCommand{Meta: m}),
		"node status":     cmd(&NodeStatusCommand{Meta: m}),
		"node set-status": cmd(&NodeSetStatusCommand{Meta: m}),
		"node fence":      cmd(&NodeFenceCommand{Meta: m}),
		"node unfence":    cmd(&NodeUnfenceCommand{Meta: m}),
		"node deregister": cmd(&NodeDeregisterCommand{Meta: m}),

		"module":        cmd(&groupCommand{Meta: m, name: "module", synopsis: "Author, test, inspect, roll out and reload Wasm modules"}),
		"module list":   cmd(&ModuleListCommand{Meta: m}),
		"module status": cmd(&ModuleStatusCommand{Meta: m}),
		"module reload": cmd(&ModuleReloadCommand{Meta: m}),
		// Module lifecycle kit: author, record, test and roll out modules.
		"module run":      cmd(&ModuleRunCommand{Meta: m}),
		"module test":     cmd(&ModuleTestCommand{Meta: m}),
		"module new":      cmd(&ModuleNewCommand{Meta: m}),
		"module record":   cmd(&ModuleRecordCommand{Meta: m}),
		"module shadow":   cmd(&ModuleShadowCommand{Meta: m}),
		"module promote":  cmd(&ModulePromoteCommand{Meta: m}),
		"module rollback": cmd(&ModuleRollbackCommand{Meta: m}),
		"module discard":  cmd(&ModuleDiscardCommand{Meta: m}),
		"module push":     cmd(&ModulePushCommand{Meta: m}),
		"module sign":     cmd(&ModuleSignCommand{Meta: m}),

		"plugin":            cmd(&groupCommand{Meta: m, name: "plugin", synopsis: "Register, inspect and deregister CSI plugins"}),
		"plugin register":   cmd(&PluginRegisterCommand{Meta: m}),
		"plugin status":     cmd(&PluginStatusCommand{Meta: m}),
		"plugin deregister": cmd(&PluginDeregisterCommand{Meta: m}),

		"alloc":          cmd(&groupCommand{Meta: m, name: "alloc", synopsis: "Register, update and inspect allocations"}),
		"alloc register": cmd(&AllocRegisterCommand{Meta: m}),
		"alloc update":   cmd(&AllocUpdateCommand{Meta: m}),
		"alloc status":   cmd(&AllocStatusCommand{Meta: m}),

		"scheduler":        cmd(&groupCommand{Meta: m, name: "scheduler", synopsis: "Inspect the scheduler bridges (Nomad)"}),
		"scheduler status": cmd(&SchedulerStatusCommand{Meta: m}),

		"system":    cmd(&groupCommand{Meta: m, name: "system", synopsis: "System maintenance"}),
		"system gc": cmd(&SystemGCCommand{Meta: m}),
		"events":    cmd(&EventsCommand{Meta: m}),

		"operator":                      cmd(&groupCommand{Meta: m, name: "operator", synopsis: "Cluster operations: raft peers and leadership, snapshots"}),
		"operator raft":                 cmd(&groupCommand{Meta: m, name: "operator raft", synopsis: "Inspect and change the raft peer set"}),
		"operator raft list-peers":      cmd(&RaftListPeersCommand{Meta: m}),
		"operator raft digest":          cmd(&RaftDigestCommand{Meta: m}),
		"operator raft remove-peer":     cmd(&RaftRemovePeerCommand{Meta: m}),
		"operator raft transfer-leader": cmd(&RaftTransferLeaderCommand{Meta: m}),
		"operator snapshot":             cmd(&groupCommand{Meta: m, name: "operator snapshot", synopsis: "Save and restore the whole cluster state"}),
		"operator snapshot save":        cmd(&SnapshotSaveCommand{Meta: m}),
		"operator snapshot restore":     cmd(&SnapshotRestoreCommand{Meta: m}),

		"acl":               cmd(&groupCommand{Meta: m, name: "acl", synopsis: "Bootstrap ACLs and manage policies and tokens"}),
		"acl bootstrap":     cmd(&ACLBootstrapCommand{Meta: m}),
		"acl policy":        cmd(&groupCommand{Meta: m, name: "acl policy", synopsis: "Apply, list, show and delete ACL policies"}),
		"acl policy apply":  cmd(&ACLPolicyApplyCommand{Meta: m}),
		"acl policy list":   cmd(&ACLPolicyListCommand{Meta: m}),
		"acl policy info":   cmd(&ACLPolicyInfoCommand{Meta: m}),
		"acl policy delete": cmd(&ACLPolicyDeleteCommand{Meta: m}),
		"acl token":         cmd(&groupCommand{Meta: m, name: "acl token", synopsis: "Create, list, show and revoke ACL tokens"}),
		"acl token create":  cmd(&ACLTokenCreateCommand{Meta: m}),
		"acl token list":    cmd(&ACLTokenListCommand{Meta: m}),
		"acl token info":    cmd(&ACLTokenInfoCommand{Meta: m}),
		"acl token self":    cmd(&ACLTokenSelfCommand{Meta: m}),
		"acl token delete":  cmd(&ACLTokenDeleteCommand{Meta: m}),

		"tls":                     cmd(&groupCommand{Meta: m, name: "tls", synopsis: "Create a CA and certificates for TLS"}),
		"tls ca":                  cmd(&groupCommand{Meta: m, name: "tls ca", synopsis: "Create a certificate authority"}),
		"tls ca create":           cmd(&TLSCACreateCommand{Meta: m}),
		"tls cert":                cmd(&groupCommand{Meta: m, name: "tls cert", synopsis: "Create server and client certificates"}),
		"tls cert create":         cmd(&TLSCertCreateCommand{Meta: m}),
		"operator keyring":        cmd(&groupCommand{Meta: m, name: "operator keyring", synopsis: "The cluster keyring that seals snapshot secrets"}),
		"operator keyring list":   cmd(&KeyringListCommand{Meta: m}),
		"operator keyring rotate": cmd(&KeyringRotateCommand{Meta: m}),
	}
}

// AgentCommand runs the leader service. It is listed in the command table
// for help; Run dispatches "agent" to runAgent (agent.go) before the CLI
// library, so the agent parses its own flags and -help.
type AgentCommand struct{}

// Help implements cli.Command.
func (*AgentCommand) Help() string {
	return "Usage: volhost agent [options]\n\n  Run the volhost agent (see volhost agent -help)."
}

// Synopsis implements cli.Command.
func (*AgentCommand) Synopsis() string { return "Run the volhost agent (leader service)" }

// Run implements cli.Command.
func (*AgentCommand) Run(args []string) int { return runAgent(args, os.Stdout, os.Stderr) }

// groupCommand is a command that only groups subcommands ("volume").
type groupCommand struct {
	*Meta
	name     string
	synopsis string
}

func (g *groupCommand) Help() string {
	return fmt.Sprintf("Usage: volhost %s <subcommand> [options] [args]\n\n  %s.", g.name, g.synopsis)
}

func (g *groupCommand) Synopsis() string { return g.synopsis }

func (g *groupCommand) Run(args []string) int {
	if len(args) > 0 {
		var subs []string
		for name := range Commands(g.Meta) {
			if rest, ok := strings.CutPrefix(name, g.name+" "); ok && !strings.Contains(rest, " ") {
				subs = append(subs, rest)
			}
		}
		return g.fail(errors.New(unknownCommand(g.name+" ", args[0], subs, "volhost "+g.name+" -help")))
	}
	return cli.RunResultHelp
}

// topLevel lists the first words of the command table.
func topLevel(commands map[string]cli.CommandFactory) []string {
	var out []string
	for name := range commands {
		if !strings.Contains(name, " ") {
			out = append(out, name)
		}
	}
	return out
}

// unknownCommand is the error of a command word (after prefix, the group
// it was given to) that is not one of known: the nearest known word when
// one is close (an edit or two away, as a typo is), else where the list is.
func unknownCommand(prefix, got string, known []string, help string) string {
	best, bestDist := "", 3
	slices.Sort(known) // ties go to the first in order, so the answer is stable
	for _, k := range known {
		if d := editDistance(got, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown command %q; did you mean %q? (run \"%s\" for the list)", prefix+got, prefix+best, help)
	}
	return fmt.Sprintf("unknown command %q; run \"%s\" for the list", prefix+got, help)
}

// editDistance is the Levenshtein distance between a and b, by bytes
// (command names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
