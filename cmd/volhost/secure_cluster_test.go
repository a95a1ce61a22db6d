package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/volhost/volhost/host/acl/acltest"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/tlsutil"
	"github.com/volhost/volhost/internal/testutil"
)

// TestSecureBinaryCluster is the ACL and TLS end-to-end check with the real
// binary: three servers with ACLs and mutual TLS (HTTPS with client
// certificates, raft over mTLS) form a cluster from certificates made by
// `volhost tls`; a release is driven through the CLI with a client token;
// a node-scoped token cannot force-deregister; a server with a
// certificate of another CA is refused at join; SIGHUP rotates the
// leader's certificate with no failed request.
//
// The attack of a client certificate on raft (it once committed a
// management token) runs against the leader's raft port.
// At the end, a backup saved by a server without ACLs is restored with
// the management token: the bootstrap stays closed on every server
// (a restore once reopened it to whoever called first).
func TestSecureBinaryCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs four agent processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "volhost")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pkiDir := filepath.Join(dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	testdataDir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(pkiDir)
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server"}, {"tls", "cert", "create", "-client"}} {
		if r := runEnv(nil, args...); r.code != 0 {
			t.Fatalf("volhost %s: %s", strings.Join(args, " "), r.stderr)
		}
	}
	abs := func(n string) string { return filepath.Join(pkiDir, n) }
	caPEM, _ := os.ReadFile(abs(caCertFile))
	caKey, _ := os.ReadFile(abs(caKeyFile))

	// Each server its own copy of the server certificate (rotation
	// changes one), and an agent config with ACLs and TLS on.
	config := func(id, ca, cert, key string) string {
		certPath, keyPath := filepath.Join(dir, id+"-cert.pem"), filepath.Join(dir, id+"-key.pem")
		for src, dst := range map[string]string{cert: certPath, key: keyPath} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		hcl := fmt.Sprintf(`acl { enabled = true }
tls {
  http = true
  rpc  = true
  ca_file   = %q
  cert_file = %q
  key_file  = %q
  verify_https_client = true
}
`, ca, certPath, keyPath)
		p := filepath.Join(dir, id+".hcl")
		if err := os.WriteFile(p, []byte(hcl), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvCert, srvKey := abs("global-server-volhost.pem"), abs("global-server-volhost-key.pem")
	ports := freePorts(t, 8)
	seed := fmt.Sprintf("127.0.0.1:%d", ports[0])
	procs := map[string]*serverProc{}
	for i, id := range []string{"s1", "s2", "s3"} {
		extra := []string{"-config", config(id, abs(caCertFile), srvCert, srvKey)}
		if i == 0 {
			extra = append(extra, "-bootstrap-expect", "3")
		} else {
			extra = append(extra, "-join", seed)
		}
		procs[id] = startServer(t, bin, dir, id, ports[i], ports[4+i], extra...)
	}

	tc, err := tlsutil.ClientFiles(abs(caCertFile), abs("global-client-volhost-0.pem"), abs("global-client-volhost-0-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leaderID := waitFor(t, ctx, "a leader", func() (string, bool) {
		for id, p := range procs {
			resp, err := hc.Get("https://" + p.http + "/v1/status/leader")
			if err != nil {
				continue
			}
			var lr api.LeaderResponse
			_ = json.NewDecoder(resp.Body).Decode(&lr)
			resp.Body.Close()
			if lr.IsLeader {
				return id, true
			}
		}
		return "", false
	})
	leader := procs[leaderID]
	var follower *serverProc
	for id, p := range procs {
		if id != leaderID {
			follower = p
		}
	}
	env := map[string]string{"VOLHOST_ADDR": "https://" + follower.http, "VOLHOST_CACERT": abs(caCertFile),
		"VOLHOST_CLIENT_CERT": abs("global-client-volhost-0.pem"), "VOLHOST_CLIENT_KEY": abs("global-client-volhost-0-key.pem")}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range env {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	must := func(env map[string]string, args ...string) string {
		t.Helper()
		r := runEnv(env, args...)
		if r.code != 0 {
			t.Fatalf("volhost %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	// The follower may not know the leader's HTTP address yet (503 "no
	// cluster leader" until the members map reaches it): retry that only.
	bootOut := waitFor(t, ctx, "bootstrap through a follower", func() (string, bool) {
		r := runEnv(env, "acl", "bootstrap", "-json")
		if r.code != 0 && !strings.Contains(r.stdout+r.stderr, "no cluster leader") {
			t.Fatalf("volhost acl bootstrap -json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		return r.stdout, r.code == 0
	})
	var boot api.ACLTokenSecret
	if err := json.Unmarshal([]byte(bootOut), &boot); err != nil {
		t.Fatal(err)
	}
	mgmt := with("VOLHOST_TOKEN", boot.SecretID)
	peers := func() int {
		var out api.RaftConfigurationResponse
		r := runEnv(mgmt, "operator", "raft", "list-peers", "-json")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
			return 0
		}
		return len(out.Servers)
	}
	waitFor(t, ctx, "three peers", func() (struct{}, bool) { return struct{}{}, peers() == 3 })

	policy := func(name, rules string) {
		p := filepath.Join(dir, name+"-policy.hcl")
		if err := os.WriteFile(p, []byte(rules), 0o600); err != nil {
			t.Fatal(err)
		}
		must(mgmt, "acl", "policy", "apply", name, p)
	}
	// Registering a node in direct mode (the leader dials its endpoints)
	// is an operator's decision: operator:write.
	policy("app", "namespace \"default\" {\n  capabilities = [\"read\", \"register\", \"claim\", \"detach\", \"deregister\"]\n}\nnode {\n  policy = \"write\"\n}\noperator {\n  policy = \"write\"\n}\n")
	policy("node", "namespace \"default\" {\n  capabilities = [\"read\", \"claim\"]\n}\nnode {\n  policy = \"write\"\n}\n")
	token := func(pol string) map[string]string {
		var tok api.ACLTokenSecret
		if err := json.Unmarshal([]byte(must(mgmt, "acl", "token", "create", "-name", pol, "-policy", pol, "-json")), &tok); err != nil {
			t.Fatal(err)
		}
		return with("VOLHOST_TOKEN", tok.SecretID)
	}
	app, node := token("app"), token("node")

	// A release through the CLI with the client token, via a follower.
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "projects/demo/zones/us-central1-a/instances/node1",
		PublishUnpublish: true, StageUnstage: true})
	spec := func(name string) string { return writeSpec(t, testdataDir, dir, name, plugin.Endpoint()) }
	must(app, "plugin", "register", spec("plugin.hcl"))
	must(app, "node", "register", spec("node.hcl"))
	must(app, "volume", "register", spec("volume.hcl"))
	must(app, "alloc", "register", spec("alloc.hcl"))
	must(app, "volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	must(app, "alloc", "update", "-status", "complete", "web-1")
	waitFor(t, ctx, "the claim released", func() (struct{}, bool) {
		r := runEnv(app, "volume", "status", "vol1")
		return struct{}{}, r.code == 0 && strings.Contains(r.stdout, "No claims")
	})
	if plugin.Attached("projects/demo/zones/us-central1-a/disks/vol1", "projects/demo/zones/us-central1-a/instances/node1") {
		t.Error("the release did not ControllerUnpublish the disk")
	}
	// The node-scoped token cannot force-deregister; nothing changes.
	r := runEnv(node, "volume", "deregister", "-force", "vol1")
	if r.code != 1 || !strings.Contains(r.stderr, "Permission denied: missing capability namespace:force-deregister") {
		t.Fatalf("force-deregister with a node token: %d %s", r.code, r.stderr)
	}
	must(app, "volume", "status", "vol1")

	// A server with a certificate of another CA is refused at join.
	foreignCA, err := tlsutil.CreateCA("foreign", 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fcert, err := tlsutil.CreateCert(tlsutil.CertRequest{Kind: tlsutil.KindServer, Days: 1, Now: time.Now(), CA: foreignCA})
	if err != nil {
		t.Fatal(err)
	}
	for n, b := range map[string][]byte{"f-ca.pem": foreignCA.Cert, "f-cert.pem": fcert.Cert, "f-key.pem": fcert.Key} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	evil := startServer(t, bin, dir, "s4", ports[3], ports[7], "-join", seed,
		"-config", config("s4", filepath.Join(dir, "f-ca.pem"), filepath.Join(dir, "f-cert.pem"), filepath.Join(dir, "f-key.pem")))
	waitFor(t, ctx, "the foreign server's join attempt to fail", func() (struct{}, bool) {
		b, _ := os.ReadFile(evil.log)
		return struct{}{}, strings.Contains(string(b), "join attempt failed")
	})
	if n := peers(); n != 3 {
		t.Fatalf("after the foreign server's join: %d peers, want 3", n)
	}

	// A client certificate (the CLI's, and a node agent's naming its
	// node) dials the leader's raft port and sends an AppendEntries with a
	// higher term carrying a management token whose secret it chose: the
	// handshake refuses it (tls.rpc with no other setting), and the secret
	// grants nothing on any server.
	if r := runEnv(nil, "tls", "cert", "create", "-client", "-node", "node1"); r.code != 0 {
		t.Fatalf("volhost tls cert create -client -node node1: %s", r.stderr)
	}
	const rogueSecret = "0b5e7a11-6a3e-4c0d-8000-00000000beef"
	tokensWith := func(secret string) int {
		req, _ := http.NewRequest(http.MethodGet, "https://"+leader.http+"/v1/acl/tokens", nil)
		req.Header.Set(api.TokenHeader, secret)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := tokensWith(rogueSecret); code != http.StatusForbidden {
		t.Fatalf("GET /v1/acl/tokens with the rogue secret before the attack: %d", code)
	}
	for _, name := range []string{"global-client-volhost-0", "global-client-volhost-1"} {
		h, err := tlsutil.Load(tlsutil.Config{CAFile: abs(caCertFile), CertFile: abs(name + ".pem"), KeyFile: abs(name + "-key.pem")})
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := testutil.AppendAsPeer(leader.raft, h.ClientConfig(), acltest.ForgedManagementToken(t, rogueSecret)); err == nil {
			t.Fatalf("%s on raft: answered %+v", name, resp)
		}
	}
	b, _ := os.ReadFile(leader.log)
	if !strings.Contains(string(b), "accepts only server certificates") {
		t.Fatal("the leader's log does not show the refused handshake")
	}
	if code := tokensWith(rogueSecret); code != http.StatusForbidden {
		t.Fatalf("GET /v1/acl/tokens with the rogue secret after the attack: %d, want 403", code)
	}
	if resp, err := hc.Get("https://" + leader.http + "/v1/status/leader"); err == nil {
		var lr api.LeaderResponse
		_ = json.NewDecoder(resp.Body).Decode(&lr)
		resp.Body.Close()
		if !lr.IsLeader {
			t.Fatal("the refused AppendEntries moved leadership")
		}
	}

	// The role attacks (SECURITY.md) through the HTTP API of the real binaries.
	secureAttacks(t, &attackTarget{hc: hc, leader: leader.http, mgmt: boot.SecretID, token: func(name, rules string) string {
		policy(name, rules)
		return token(name)["VOLHOST_TOKEN"]
	}})

	// SIGHUP rotation on the leader with requests flowing.
	serial := func() string {
		resp, err := hc.Get("https://" + leader.http + "/v1/status/leader")
		if err != nil {
			return ""
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	old := serial()
	load := testutil.StartGets(hc, "https://"+leader.http+"/v1/status/leader")
	next, err := tlsutil.CreateCert(tlsutil.CertRequest{Kind: tlsutil.KindServer, Days: 1, Now: time.Now(), CA: tlsutil.PEM{Cert: caPEM, Key: caKey}})
	if err != nil {
		t.Fatal(err)
	}
	// The key first would pair with the old certificate for a moment;
	// write both, then signal.
	if err := os.WriteFile(filepath.Join(dir, leaderID+"-cert.pem"), next.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, leaderID+"-key.pem"), next.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := leader.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the rotated certificate", func() (struct{}, bool) { s := serial(); return struct{}{}, s != "" && s != old })
	n := load.Requests.Load()
	waitFor(t, ctx, "requests after the rotation", func() (struct{}, bool) { return struct{}{}, load.Requests.Load() >= n+5 })
	load.Stop()
	if f := load.Failures.Load(); f > 0 {
		t.Fatalf("%d of %d requests failed across the rotation", f, load.Requests.Load())
	}
	// Raft still replicates over mutual TLS after the rotation.
	must(app, "volume", "deregister", "vol1")

	// (g) A backup from before ACLs, restored with the management token,
	// does not reopen the bootstrap: a server without ACLs saves its
	// state, the secure cluster restores it (-force-foreign: another
	// cluster's), and an anonymous bootstrap is refused on every server
	// while the management token still works.
	pp := freePorts(t, 2)
	plain := startServer(t, bin, dir, "s5", pp[0], pp[1], "-bootstrap-expect", "1")
	plainEnv := map[string]string{"VOLHOST_ADDR": "http://" + plain.http}
	backup := filepath.Join(dir, "before-acl.snap")
	waitFor(t, ctx, "the plain server's snapshot", func() (struct{}, bool) {
		return struct{}{}, runEnv(plainEnv, "operator", "snapshot", "save", backup).code == 0
	})
	must(mgmt, "operator", "snapshot", "restore", "-force-foreign", backup)
	for id, p := range procs {
		// Anonymous: the CLI with the client certificate and no token.
		r := runEnv(with("VOLHOST_ADDR", "https://"+p.http), "acl", "bootstrap")
		if r.code != 1 || !strings.Contains(r.stderr, "already") {
			t.Fatalf("anonymous bootstrap on %s after restoring a snapshot saved before ACLs: exit %d %s%s, want refused", id, r.code, r.stdout, r.stderr)
		}
		waitFor(t, ctx, "the management token on "+id, func() (struct{}, bool) {
			req, _ := http.NewRequest(http.MethodGet, "https://"+p.http+"/v1/acl/tokens?stale=true", nil)
			req.Header.Set(api.TokenHeader, boot.SecretID)
			resp, err := hc.Do(req)
			if err != nil {
				return struct{}{}, false
			}
			resp.Body.Close()
			return struct{}{}, resp.StatusCode == http.StatusOK
		})
	}
	// The backup's state, which has no node1, replaced the cluster's.
	if r := runEnv(mgmt, "node", "status", "node1"); r.code == 0 {
		t.Fatalf("the restore did not bring the backup's state: %s", r.stdout)
	}
}
