package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes a spec into a temporary directory and returns its path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// An endpoint in the wrong form is a 400 naming the rule, at plugin and
// node registration alike; an endpoint nobody listens on names the dial
// error (the CLI runs on the agent's host). Nothing is registered.
func TestRegisterEndpointErrors(t *testing.T) {
	a := devAgent(t)
	e := &cliEnv{t: t, addr: "http://" + a.HTTPAddr()}
	missing := "unix://" + filepath.Join(t.TempDir(), "missing.sock")
	for _, c := range []struct{ endpoint, want string }{
		{"/run/csi/demo.sock", "(no scheme): want unix:///absolute/path/to.sock or tcp://host:port"},
		{"127.0.0.1:9000", "(no scheme): want unix:///"},
		{"foo://bar", "(scheme foo is neither unix nor tcp): want unix:///"},
		{"unix://relative.sock", "three slashes, unix:///relative.sock"},
		{missing, "no such file or directory"},
	} {
		plugin := writeFile(t, "plugin.hcl", `plugin "p" { controller_endpoint = "`+c.endpoint+`" }`)
		r := e.run("plugin", "register", plugin)
		if r.code != 1 || !strings.Contains(r.stderr, "controller_endpoint") || !strings.Contains(r.stderr, c.want) {
			t.Errorf("plugin register %s: exit %d, stderr %q, want %q", c.endpoint, r.code, r.stderr, c.want)
		}
		if strings.Contains(r.stderr, "endpoint unreachable") {
			t.Errorf("plugin register %s hides the reason: %q", c.endpoint, r.stderr)
		}
		node := writeFile(t, "node.hcl", `node "n1" {
  plugin "p" { endpoint = "`+c.endpoint+`" }
}`)
		r = e.run("node", "register", node)
		if r.code != 1 || !strings.Contains(r.stderr, "plugins.p.endpoint") || !strings.Contains(r.stderr, c.want) {
			t.Errorf("node register %s: exit %d, stderr %q, want %q", c.endpoint, r.code, r.stderr, c.want)
		}
	}
	if out := e.ok("plugin", "status"); strings.Contains(out, " p ") {
		t.Errorf("a refused plugin was registered:\n%s", out)
	}
	if out := e.ok("node", "status"); strings.Contains(out, "n1") {
		t.Errorf("a refused node was registered:\n%s", out)
	}
}
