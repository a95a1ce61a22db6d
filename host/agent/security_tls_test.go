package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/tlsutil"
	"github.com/volhost/volhost/internal/testutil"
)

// testPKI is a CA and certificates written under a directory.
type testPKI struct {
	dir string
	ca  tlsutil.PEM
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := tlsutil.CreateCA("test", 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: t.TempDir(), ca: ca}
	p.write(t, "ca.pem", ca.Cert)
	return p
}

func (p *testPKI) write(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// cert writes a certificate of kind as name.pem/name-key.pem.
func (p *testPKI) cert(t *testing.T, kind tlsutil.Kind, name string) (certFile, keyFile string) {
	t.Helper()
	c, err := tlsutil.CreateCert(tlsutil.CertRequest{Kind: kind, Days: 1, Now: time.Now(), CA: p.ca})
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", c.Cert), p.write(t, name+"-key.pem", c.Key)
}

// client is an HTTPS client presenting the certificate (none when
// certFile is "") and trusting the CA; every request dials anew, so a
// reloaded server certificate shows at once.
func (p *testPKI) client(t *testing.T, certFile, keyFile string) *http.Client {
	t.Helper()
	tc, err := tlsutil.ClientFiles(filepath.Join(p.dir, "ca.pem"), certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
}

func secureConfig(t *testing.T, p *testPKI, id string) *Config {
	t.Helper()
	cert, key := p.cert(t, tlsutil.KindServer, id)
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NodeID = id
	cfg.BindAddr = "127.0.0.1:0"
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.ACL.Enabled = true
	cfg.TLS = &TLSConfig{HTTP: true, RPC: true, CAFile: filepath.Join(p.dir, "ca.pem"), CertFile: cert, KeyFile: key,
		VerifyServerHostname: true, VerifyHTTPSClient: true}
	cfg.Server = &ServerConfig{Enabled: true, RetryMaxInterval: "200ms"}
	return cfg
}

func newSecureAgent(t *testing.T, cfg *Config) *Agent {
	t.Helper()
	a, err := New(cfg, Options{
		Logger: hclog.New(&hclog.LoggerOptions{Name: cfg.NodeID, Level: hclog.Warn, Output: logOutput(t)}),
		TuneCluster: func(cc *cluster.Config) {
			cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = testHeartbeat, testHeartbeat, testLease
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown() })
	return a
}

// TestSecureCluster: three servers with ACLs and mutual TLS everywhere
// form a cluster (joins authorized by their server certificates), a
// client token works through a follower (forwarding over HTTPS), a
// node-scoped token cannot force-deregister, a server of another CA and
// a client certificate posing as a server are refused at join with the
// peer set unchanged, and a certificate reload (SIGHUP) rotates the
// serving certificate with no failed request.
func TestSecureCluster(t *testing.T) {
	p := newPKI(t)
	seedCfg := secureConfig(t, p, "s1")
	seedCfg.Server.BootstrapExpect = 3
	seed := newSecureAgent(t, seedCfg)
	agents := []*Agent{seed}
	for _, id := range []string{"s2", "s3"} {
		cfg := secureConfig(t, p, id)
		cfg.Server.Join = []string{seed.HTTPAddr()}
		agents = append(agents, newSecureAgent(t, cfg))
	}
	var leader *Agent
	testutil.WaitFor(t, "a leader with all three members known", func() bool {
		for _, a := range agents {
			if a.Cluster.IsLeader() && len(a.Cluster.Members()) == 3 {
				leader = a
				return true
			}
		}
		return false
	})
	var follower *Agent
	for _, a := range agents {
		if a != leader {
			follower = a
		}
	}
	ccert, ckey := p.cert(t, tlsutil.KindClient, "cli")
	hc := p.client(t, ccert, ckey)
	url := func(a *Agent, path string) string { return "https://" + a.HTTPAddr() + path }

	// Without a client certificate the HTTPS API refuses the handshake.
	if _, err := p.client(t, "", "").Get(url(leader, "/v1/status/leader")); err == nil {
		t.Fatal("a request without a client certificate was served")
	}
	// Bootstrap through a follower: forwarded to the leader over HTTPS.
	code, out := httpDo(t, hc, "POST", url(follower, "/v1/acl/bootstrap"), "", "")
	var boot api.ACLTokenSecret
	if code != http.StatusOK || json.Unmarshal([]byte(out), &boot) != nil {
		t.Fatalf("bootstrap via a follower: %d %s", code, out)
	}
	mgmt := boot.SecretID
	rules, _ := json.Marshal(api.ACLPolicyRequest{Rules: "namespace \"default\" {\n capabilities = [\"read\", \"register\", \"claim\", \"deregister\"]\n}\nnode {\n policy = \"write\"\n}"})
	if code, out := httpDo(t, hc, "PUT", url(follower, "/v1/acl/policy/node"), string(rules), mgmt); code != http.StatusOK {
		t.Fatalf("policy: %d %s", code, out)
	}
	code, out = httpDo(t, hc, "PUT", url(leader, "/v1/acl/token"), `{"name":"n1","policies":["node"]}`, mgmt)
	var nodeTok api.ACLTokenSecret
	if code != http.StatusOK || json.Unmarshal([]byte(out), &nodeTok) != nil {
		t.Fatalf("token: %d %s", code, out)
	}
	vol := `{"volumes":[{"id":"v1","external_id":"d1","plugin_id":"p","access_mode":"single-node-writer","attachment_mode":"file-system"}]}`
	if code, out := httpDo(t, hc, "PUT", url(follower, "/v1/volumes"), vol, nodeTok.SecretID); code == http.StatusForbidden {
		t.Fatalf("register with the node token via a follower: %d %s", code, out)
	}
	code, out = httpDo(t, hc, "DELETE", url(follower, "/v1/volume/v1?force=true"), "", nodeTok.SecretID)
	if code != http.StatusForbidden || !strings.Contains(out, "namespace:force-deregister") {
		t.Fatalf("force-deregister with the node token: %d %s, want 403", code, out)
	}

	peersBefore := peerCount(t, leader)
	join := func(hc *http.Client, token string) (int, string, error) {
		body := `{"id":"intruder","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2","cluster_id":"` + leader.Cluster.ID() + `","version":1}`
		req, _ := http.NewRequest("POST", url(leader, cluster.JoinPath), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set(api.TokenHeader, token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var er api.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&er)
		return resp.StatusCode, er.Error, nil
	}
	// A server certificate from another CA: the handshake fails.
	foreign := newPKI(t)
	fcert, fkey := foreign.cert(t, tlsutil.KindServer, "evil")
	fc, _ := tlsutil.ClientFiles(filepath.Join(p.dir, "ca.pem"), fcert, fkey)
	if _, _, err := join(&http.Client{Transport: &http.Transport{TLSClientConfig: fc}}, ""); err == nil {
		t.Fatal("a server certificate of a foreign CA got through the handshake")
	}
	// A client certificate of the right CA is not a server identity.
	if code, msg, err := join(hc, ""); err != nil || code != http.StatusForbidden || !strings.Contains(msg, "Permission denied") {
		t.Fatalf("join with a client certificate: %d %q %v, want 403", code, msg, err)
	}
	// A management token is, but a server that does not answer at its
	// raft address would break the quorum: refused.
	if code, msg, err := join(hc, mgmt); err != nil || code != http.StatusConflict || !strings.Contains(msg, "without quorum") {
		t.Fatalf("join of an unreachable server: %d %q %v, want 409", code, msg, err)
	}
	if n := peerCount(t, leader); n != peersBefore {
		t.Fatalf("refused joins changed the peer set: %d -> %d", peersBefore, n)
	}

	// Rotation: new server certificate files and a reload (what SIGHUP
	// does) while requests keep flowing; none fails and new connections
	// see the new certificate.
	serial := func() string {
		resp, err := hc.Get(url(leader, "/v1/status/leader"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	old := serial()
	load := testutil.StartGets(hc, url(leader, "/v1/status/leader"))
	testutil.WaitFor(t, "requests flowing", func() bool { return load.Requests.Load() >= 5 })
	c, err := tlsutil.CreateCert(tlsutil.CertRequest{Kind: tlsutil.KindServer, Days: 1, Now: time.Now(), CA: p.ca})
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, leader.cfg.NodeID+".pem", c.Cert)
	p.write(t, leader.cfg.NodeID+"-key.pem", c.Key)
	if err := leader.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	n := load.Requests.Load()
	testutil.WaitFor(t, "requests after the reload", func() bool { return load.Requests.Load() >= n+5 })
	load.Stop()
	if f := load.Failures.Load(); f > 0 {
		t.Fatalf("%d of %d requests failed across the rotation", f, load.Requests.Load())
	}
	if now := serial(); now == old {
		t.Fatalf("serving certificate still %s after the reload", old)
	}
	// Raft keeps replicating over mutual TLS: a write commits.
	if code, out := httpDo(t, hc, "PUT", url(follower, "/v1/system/gc"), "", mgmt); code != http.StatusOK {
		t.Fatalf("write after rotation: %d %s", code, out)
	}
}
