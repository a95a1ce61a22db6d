package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
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

// aclEnv is a CLI pointed at an API with ACLs on and bootstrapped; it
// returns the management secret.
func aclEnv(t *testing.T) (*cliEnv, string) {
	t.Helper()
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{Audit: b}, b.Store, b, nil)
	s.EnableACL(api.ACLConfig{Service: acl.NewService(b.Store, b, nil), Audit: b})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	e := &cliEnv{t: t, backend: b, addr: ts.URL}
	var boot api.ACLTokenSecret
	if err := json.Unmarshal([]byte(e.ok("acl", "bootstrap", "-json")), &boot); err != nil {
		t.Fatal(err)
	}
	return e, boot.SecretID
}

// With ACLs on and no token, the CLI says no token was sent and how to
// send one, in its own flags; never an HTTP header or query parameter.
func TestDeniedWithoutToken(t *testing.T) {
	e, mgmt := aclEnv(t)
	r := e.run("volume", "status")
	want := "Error: Permission denied: missing capability namespace:read on every namespace (pass -namespace=<ns> to ask for one); no ACL token was sent: pass -token=<secret> or set VOLHOST_TOKEN\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("volume status without a token: exit %d\n got %q\nwant %q", r.code, r.stderr, want)
	}
	r = e.run("node", "status")
	if r.code != 1 || !strings.Contains(r.stderr, "no ACL token was sent: pass -token=<secret> or set VOLHOST_TOKEN") {
		t.Errorf("node status without a token: exit %d %q", r.code, r.stderr)
	}
	for _, hint := range []string{"?namespace", "X-Volhost-Token", "header"} {
		if strings.Contains(r.stderr, hint) {
			t.Errorf("CLI error suggests HTTP (%q): %q", hint, r.stderr)
		}
	}
	// A token that is sent but lacks the capability is not told to send one.
	r = e.run("volume", "status", "-token", "00000000-0000-0000-0000-000000000000")
	if r.code != 1 || strings.Contains(r.stderr, "no ACL token was sent") {
		t.Errorf("with a token: exit %d %q", r.code, r.stderr)
	}
	e.ok("volume", "status", "-token", mgmt)
}
