package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/tlsutil"
)

// runEnv runs the CLI with the environment in env.
func runEnv(env map[string]string, args ...string) result {
	var out, errb bytes.Buffer
	code := Run(args, func(k string) string { return env[k] }, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// TestSecureCLI walks README "Securing a cluster" with the CLI: create a
// CA and certificates in the working directory, serve the API over
// HTTPS requiring client certificates with ACLs on, bootstrap, write a
// policy, create a client token, use it through VOLHOST_TOKEN and -token,
// see a denial, revoke it.
func TestSecureCLI(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	must := func(env map[string]string, args ...string) string {
		t.Helper()
		r := runEnv(env, args...)
		if r.code != 0 {
			t.Fatalf("volhost %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	must(nil, "tls", "ca", "create")
	must(nil, "tls", "cert", "create", "-server")
	must(nil, "tls", "cert", "create", "-client")
	if r := runEnv(nil, "tls", "ca", "create"); r.code != 1 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("second ca create: %d %s", r.code, r.stderr)
	}
	if st, err := os.Stat(filepath.Join(dir, "global-server-volhost-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("server key file: %v %v", st, err)
	}
	h, err := tlsutil.Load(tlsutil.Config{CAFile: "volhost-agent-ca.pem", CertFile: "global-server-volhost.pem",
		KeyFile: "global-server-volhost-key.pem", VerifyHTTPSClient: true})
	if err != nil {
		t.Fatal(err)
	}
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{}, b.Store, b, nil)
	s.EnableACL(api.ACLConfig{Service: acl.NewService(b.Store, b, nil), Audit: b})
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.TLS = h.HTTPServerConfig()
	ts.StartTLS()
	t.Cleanup(ts.Close)

	env := map[string]string{"VOLHOST_ADDR": ts.URL, "VOLHOST_CACERT": "volhost-agent-ca.pem",
		"VOLHOST_CLIENT_CERT": "global-client-volhost-0.pem", "VOLHOST_CLIENT_KEY": "global-client-volhost-0-key.pem"}
	if r := runEnv(map[string]string{"VOLHOST_ADDR": ts.URL, "VOLHOST_CACERT": "volhost-agent-ca.pem"}, "acl", "bootstrap"); r.code != 1 {
		t.Fatalf("without a client certificate: exit %d %s", r.code, r.stdout)
	}
	var boot api.ACLTokenSecret
	if err := json.Unmarshal([]byte(must(env, "acl", "bootstrap", "-json")), &boot); err != nil {
		t.Fatal(err)
	}
	if r := runEnv(env, "acl", "bootstrap"); r.code != 1 || !strings.Contains(r.stderr, "already") {
		t.Fatalf("second bootstrap: %d %s", r.code, r.stderr)
	}
	if err := os.WriteFile("node.hcl", []byte("namespace \"default\" {\n  capabilities = [\"read\", \"claim\"]\n}\nnode {\n  policy = \"write\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	must(env, "acl", "policy", "apply", "-token", boot.SecretID, "-description", "node agents", "node", "node.hcl")
	contains(t, "policy list", must(env, "acl", "policy", "list", "-token", boot.SecretID), "node", "node agents")
	contains(t, "policy info", must(env, "acl", "policy", "info", "-token", boot.SecretID, "node"), `policy = "write"`)
	var tok api.ACLTokenSecret
	if err := json.Unmarshal([]byte(must(env, "acl", "token", "create", "-token", boot.SecretID, "-name", "n1", "-policy", "node", "-ttl", "1h", "-json")), &tok); err != nil {
		t.Fatal(err)
	}
	list := must(env, "acl", "token", "list", "-token", boot.SecretID)
	contains(t, "token list", list, tok.AccessorID, "n1", "node")
	if strings.Contains(list, tok.SecretID) {
		t.Fatal("token list shows a secret")
	}
	clientEnv := map[string]string{}
	for k, v := range env {
		clientEnv[k] = v
	}
	clientEnv["VOLHOST_TOKEN"] = tok.SecretID
	contains(t, "token self", must(clientEnv, "acl", "token", "self"), tok.AccessorID, "n1")
	must(clientEnv, "node", "status")
	r := runEnv(clientEnv, "volume", "deregister", "-force", "v1")
	if r.code != 1 || !strings.Contains(r.stderr, "Permission denied: missing capability namespace:force-deregister") {
		t.Fatalf("force deregister with a node token: %d %s", r.code, r.stderr)
	}
	if r := runEnv(clientEnv, "acl", "token", "list"); r.code != 1 || !strings.Contains(r.stderr, "missing capability management") {
		t.Fatalf("token list with a client token: %d %s", r.code, r.stderr)
	}
	must(env, "acl", "token", "delete", "-token", boot.SecretID, tok.AccessorID)
	if r := runEnv(clientEnv, "node", "status"); r.code != 1 || !strings.Contains(r.stderr, "token not found") {
		t.Fatalf("revoked token: %d %s", r.code, r.stderr)
	}
	must(env, "acl", "policy", "delete", "-token", boot.SecretID, "node")
}
