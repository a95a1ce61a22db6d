// Command volhost is the single volhost binary: `volhost agent` runs the
// leader service, every other command is the operator CLI, which talks to
// an agent's HTTP API (-address or VOLHOST_ADDR, default
// http://127.0.0.1:4747) in the style of the reference scheduler's CLI.
// Every read takes -json; exit code 0 means success and 1 an error, reported
// as one line on stderr.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/cli"
)

// Version is the build's version, printed by -version.
var Version = "0.1.0-dev"

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
		return runAgent(args[1:])
	}
	ui := &cli.BasicUi{Writer: stdout, ErrorWriter: stderr}
	meta := &Meta{Ui: ui, Env: env, Ctx: ctx}
	c := &cli.CLI{
		Name:       "volhost",
		Version:    Version,
		Args:       args,
		Commands:   Commands(meta),
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

// Commands returns the command table. Module commands (issue 4: `module
// list|status|reload`) and `operator raft list-peers` register here too.
func Commands(m *Meta) map[string]cli.CommandFactory {
	cmd := func(c cli.Command) cli.CommandFactory {
		return func() (cli.Command, error) { return c, nil }
	}
	return map[string]cli.CommandFactory{
		"agent": cmd(&AgentCommand{}),

		"volume":            cmd(&groupCommand{Meta: m, name: "volume", synopsis: "Register, inspect, claim, detach and deregister CSI volumes"}),
		"volume register":   cmd(&VolumeRegisterCommand{Meta: m}),
		"volume status":     cmd(&VolumeStatusCommand{Meta: m}),
		"volume claim":      cmd(&VolumeClaimCommand{Meta: m}),
		"volume deregister": cmd(&VolumeDeregisterCommand{Meta: m}),
		"volume detach":     cmd(&VolumeDetachCommand{Meta: m}),
		"volume leftovers":  cmd(&VolumeLeftoversCommand{Meta: m}),

		"node":            cmd(&groupCommand{Meta: m, name: "node", synopsis: "Register and inspect client nodes"}),
		"node register":   cmd(&NodeRegisterCommand{Meta: m}),
		"node status":     cmd(&NodeStatusCommand{Meta: m}),
		"node set-status": cmd(&NodeSetStatusCommand{Meta: m}),
		"node fence":      cmd(&NodeFenceCommand{Meta: m}),
		"node unfence":    cmd(&NodeUnfenceCommand{Meta: m}),

		"module":        cmd(&groupCommand{Meta: m, name: "module", synopsis: "Author, test, inspect, roll out and reload Wasm modules"}),
		"module list":   cmd(&ModuleListCommand{Meta: m}),
		"module status": cmd(&ModuleStatusCommand{Meta: m}),
		"module reload": cmd(&ModuleReloadCommand{Meta: m}),
		// Module lifecycle kit (issue 15).
		"module run":      cmd(&ModuleRunCommand{Meta: m}),
		"module test":     cmd(&ModuleTestCommand{Meta: m}),
		"module new":      cmd(&ModuleNewCommand{Meta: m}),
		"module record":   cmd(&ModuleRecordCommand{Meta: m}),
		"module shadow":   cmd(&ModuleShadowCommand{Meta: m}),
		"module promote":  cmd(&ModulePromoteCommand{Meta: m}),
		"module rollback": cmd(&ModuleRollbackCommand{Meta: m}),
		"module push":     cmd(&ModulePushCommand{Meta: m}),
		"module sign":     cmd(&ModuleSignCommand{Meta: m}),

		"plugin":          cmd(&groupCommand{Meta: m, name: "plugin", synopsis: "Register and inspect CSI plugins"}),
		"plugin register": cmd(&PluginRegisterCommand{Meta: m}),
		"plugin status":   cmd(&PluginStatusCommand{Meta: m}),

		"alloc":          cmd(&groupCommand{Meta: m, name: "alloc", synopsis: "Register, update and inspect allocations"}),
		"alloc register": cmd(&AllocRegisterCommand{Meta: m}),
		"alloc update":   cmd(&AllocUpdateCommand{Meta: m}),
		"alloc status":   cmd(&AllocStatusCommand{Meta: m}),

		"system":    cmd(&groupCommand{Meta: m, name: "system", synopsis: "System maintenance"}),
		"system gc": cmd(&SystemGCCommand{Meta: m}),
		"events":    cmd(&EventsCommand{Meta: m}),

		"operator":                      cmd(&groupCommand{Meta: m, name: "operator", synopsis: "Cluster operations: raft peers and leadership, snapshots"}),
		"operator raft":                 cmd(&groupCommand{Meta: m, name: "operator raft", synopsis: "Inspect and change the raft peer set"}),
		"operator raft list-peers":      cmd(&RaftListPeersCommand{Meta: m}),
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
func (*AgentCommand) Run(args []string) int { return runAgent(args) }

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
		return g.fail(fmt.Errorf("unknown command %q; run \"volhost %s -help\" for the list", g.name+" "+args[0], g.name))
	}
	return cli.RunResultHelp
}
