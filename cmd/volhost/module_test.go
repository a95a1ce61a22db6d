package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/agent"
	"github.com/volhost/volhost/plugins/pluginstest"
)

// moduleAgent runs a dev agent with moduleDir ("" for none) and returns a
// CLI pointed at it.
func moduleAgent(t *testing.T, moduleDir string) *cliEnv {
	t.Helper()
	a := startModuleAgent(t, func(cfg *agent.Config) { cfg.ModuleDir = moduleDir })
	return &cliEnv{t: t, addr: "http://" + a.HTTPAddr()}
}

// startModuleAgent starts a dev agent with the shared module compilation
// cache and tweak applied to its config, waits until it leads, and shuts
// it down when the test ends.
func startModuleAgent(t *testing.T, tweak func(*agent.Config)) *agent.Agent {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.Dev = true
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.ModuleCacheDir = pluginstest.CacheDir()
	tweak(cfg)
	a, err := agent.New(cfg, agent.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Cluster.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	// The first module load runs after the API listens.
	select {
	case <-a.ModulesLoaded():
	case <-time.After(10 * time.Minute):
		t.Fatal("the agent's modules did not load within 10 minutes")
	}
	return a
}

const defaultPolicyManifest = `kind = "release-policy"
version = "1.0.0"
default = true
limits {
  pool_size = 1
}
`

func TestModuleCommands(t *testing.T) {
	dir := t.TempDir()
	good := pluginstest.Wasm(t, "default-policy")
	pluginstest.Install(t, dir, "policy", good, defaultPolicyManifest)
	pluginstest.Install(t, dir, "other", pluginstest.Wasm(t, "fault-version"), `kind = "release-policy"
volumes = ["batch/*"]
`)
	pluginstest.Install(t, dir, "gcepd-adapter", pluginstest.Wasm(t, "gcepd-adapter"), `kind = "csi-adapter"
plugin_ids = ["gcepd"]
`)
	e := moduleAgent(t, dir)

	list := e.ok("module", "list")
	contains(t, "module list", list, "policy", "serving", "other", "refused", "module speaks ABI v99, host speaks v1")
	contains(t, "module status", e.ok("module", "status", "policy"), "State            = serving", "Selects          = default", "Adapts Steps     = -", "Timeouts         = instrumented")
	contains(t, "module status", e.ok("module", "status", "gcepd-adapter"), "Adapts Steps     = controller-publish, controller-unpublish")
	contains(t, "module status -json", e.ok("module", "status", "-json", "gcepd-adapter"), `"adapt_steps": [`)
	contains(t, "module list -json", e.ok("module", "list", "-json"), `"refused"`)

	if r := e.run("module", "status", "-volumes", "0", "policy"); r.code != 1 || !strings.Contains(r.stderr, "-volumes must be a positive number") {
		t.Errorf("status -volumes 0: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.run("module", "status", "nope"); r.code != 1 || r.stderr != "Error: module \"nope\" does not exist\n" {
		t.Errorf("status of an unknown module: exit %d, stderr %q", r.code, r.stderr)
	}

	// Fix the refused module and reload by hand: it serves.
	pluginstest.Install(t, dir, "other", good, `kind = "release-policy"
volumes = ["batch/*"]
`)
	reloaded := e.ok("module", "reload")
	for _, line := range strings.Split(reloaded, "\n") {
		if strings.HasPrefix(line, "other ") && !strings.Contains(line, "serving") {
			t.Errorf("after reload: %q, want the fixed module serving", line)
		}
	}
}

func TestModuleReloadWithoutModuleDir(t *testing.T) {
	e := moduleAgent(t, "")
	r := e.run("module", "reload")
	if r.code != 1 || !strings.Contains(r.stderr, "no module directory is configured") {
		t.Errorf("reload without -module-dir: exit %d, stderr %q", r.code, r.stderr)
	}
	contains(t, "module list", e.ok("module", "list"), "No modules")
}
