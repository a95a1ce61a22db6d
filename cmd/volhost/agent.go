package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/volhost/volhost/host/agent"
)

const agentHelp = `Usage: volhost agent [options]

  Runs a volhost server: the state store, the replicated log, the HTTP API
  and, while this server leads, the volume watcher that releases claims.

  volhost agent -dev                       in-memory single-node leader
  volhost agent -data-dir /var/lib/volhost persistent single-node cluster

  A three-server cluster: the seed waits for two others to join it.
  volhost agent -server -data-dir D1 -node-id s1 -bind 10.0.0.1:4748 -bootstrap-expect 3
  volhost agent -server -data-dir D2 -node-id s2 -bind 10.0.0.2:4748 -join 10.0.0.1:4747
  volhost agent -server -data-dir D3 -node-id s3 -bind 10.0.0.3:4748 -join 10.0.0.1:4747

  A node agent on every node: registers the node, heartbeats, and runs
  the node steps the leader sends against the node's local plugin sockets
  (see README "Running node agents"). The servers listen for agents with
  node_rpc { address = "10.0.0.1:4749" }. It journals the release steps
  it ran under root_dir/journal, so a restart never runs one twice.
  volhost agent -client -config client.hcl

Security (README "Securing a cluster"):
  Certificates carry roles. Raft, joins and request forwarding take only
  server certificates (volhost tls cert create -server), always; the node
  RPC takes client certificates, bound to their node with -node.
  INSECURE, logged at start: a server without tls { rpc = true } (whoever
  reaches its raft port writes the state, ACL tokens included); node_rpc
  without acl { enabled = true } (a certificate naming no node may act as
  any node) or without tls.rpc (secrets in clear); a scheduler "nomad"
  block sending its token over plain http to another machine.

Options:
`

// printFlags lists fs's flags in the layout of every other command's help
// ("-flag=<value>" over an indented description; a bool is just "-flag"),
// rather than the flag package's own.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		head := "-" + f.Name
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			head += "=<" + name + ">"
		}
		fmt.Fprintf(w, "\n  %s\n    %s\n", head, usage)
	})
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// runAgent parses the agent's flags and config files and runs it until
// SIGINT or SIGTERM.
func runAgent(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // help and errors are printed below, as other commands print theirs
	fs.Usage = func() {}
	var (
		configs stringList
		flags   = &agent.Config{HTTP: &agent.HTTPConfig{}, Server: &agent.ServerConfig{}, ACL: &agent.ACLConfig{}}
		joins   stringList
	)
	fs.Var(&configs, "config", "HCL config `file` (repeatable; later files win, flags win over files)")
	fs.BoolVar(&flags.Dev, "dev", false, "keep all state in memory (single-node leader)")
	fs.StringVar(&flags.DataDir, "data-dir", "", "`dir`ectory for the raft log and snapshots")
	fs.StringVar(&flags.NodeID, "node-id", "", "this server's raft `id` (default volhost-1)")
	fs.StringVar(&flags.BindAddr, "bind", "", "raft transport `address` when -data-dir is set (default 127.0.0.1:4748)")
	fs.StringVar(&flags.HTTP.Address, "http-addr", "", "HTTP API `address` (default 127.0.0.1:4747)")
	fs.StringVar(&flags.ModuleDir, "module-dir", "", "`dir`ectory of Wasm policy and adapter modules")
	fs.StringVar(&flags.LogLevel, "log-level", "", "`level`: trace, debug, info, warn, error or off (default info)")
	fs.BoolVar(&flags.LogJSON, "log-json", false, "log as JSON lines")
	fs.BoolVar(&flags.Server.Enabled, "server", false, "run as one server of a multi-server cluster (needs -data-dir)")
	fs.IntVar(&flags.Server.BootstrapExpect, "bootstrap-expect", 0, "on the seed server: bootstrap once `N` servers (itself included) asked to join")
	fs.Var(&joins, "join", "HTTP API `address` of a server to join (repeatable; retried with backoff)")
	fs.StringVar(&flags.Server.AdvertiseRaft, "advertise-raft", "", "raft `address` other servers reach this one at (when -bind is 0.0.0.0)")
	fs.StringVar(&flags.Server.AdvertiseHTTP, "advertise-http", "", "API `address` other servers forward to (when -http-addr is 0.0.0.0)")
	fs.BoolVar(&flags.ACL.Enabled, "acl-enabled", false, "enforce ACLs: every request needs a token granting its capability (see volhost acl bootstrap)")
	isClient := fs.Bool("client", false, "run as a node agent (the client block of -config): no server parts")
	nodeRPC := fs.String("node-rpc-addr", "", "`address` node agents connect to (servers; default off, port 4749 by convention)")
	fs.StringVar(&flags.Region, "region", "", "`region` named in TLS server certificates, server.<region>.volhost (default global)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(stdout, agentHelp)
			printFlags(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "Error: %v (see volhost agent -help)\n", err)
		return 1
	}
	flags.Server.Join = joins
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "Error: unexpected argument %q (see volhost agent -help)\n", fs.Arg(0))
		return 1
	}

	cfg := agent.DefaultConfig()
	for _, path := range configs {
		c, err := agent.LoadConfigFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "Error: %v\n", err)
			return 1
		}
		cfg.Merge(c)
	}
	if *nodeRPC != "" {
		flags.NodeRPC = &agent.NodeRPCConfig{Address: *nodeRPC}
	}
	cfg.Merge(flags)
	if *isClient {
		return runClient(cfg)
	}

	a, err := agent.New(cfg, agent.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	a.ApplyDefaultMemoryLimit()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go reloadOnHangup(ctx, a)
	if err := a.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		return 1
	}
	return 0
}

// reloadOnHangup reloads the TLS certificates and the module directory on
// every SIGHUP until ctx ends, the way operators expect a daemon to re-read
// what it serves.
func reloadOnHangup(ctx context.Context, a *agent.Agent) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := a.ReloadTLS(); err != nil {
				fmt.Fprintf(os.Stderr, "on SIGHUP: %v (the previous certificates keep serving)\n", err)
			}
			if _, err := a.ReloadModules(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "module reload on SIGHUP: %v\n", err)
			}
		}
	}
}

// runClient runs a node agent until SIGINT or SIGTERM.
func runClient(cfg *agent.Config) int {
	if cfg.Client == nil {
		cfg.Client = &agent.ClientConfig{}
	}
	cfg.Client.Enabled = true
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := agent.RunClient(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 1
	}
	return 0
}
