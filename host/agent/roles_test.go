package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/volhost/volhost/host/acl/acltest"
	nodeagent "github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/host/tlsutil"
	"github.com/volhost/volhost/internal/testutil"
)

// holder loads a certificate of kind made by the test CA.
func (p *testPKI) holder(t *testing.T, req tlsutil.CertRequest, name string) *tlsutil.Holder {
	t.Helper()
	req.CA, req.Days, req.Now = p.ca, 1, time.Now()
	c, err := tlsutil.CreateCert(req)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tlsutil.Load(tlsutil.Config{CAFile: filepath.Join(p.dir, "ca.pem"),
		CertFile: p.write(t, name+".pem", c.Cert), KeyFile: p.write(t, name+"-key.pem", c.Key)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A client certificate of the cluster CA (the one every node agent and
// operator holds) reaches no raft RPC: with tls.rpc on and nothing else
// set, its AppendEntries of a management token with a higher term ends
// with the handshake, the term and the log unchanged, and the secret
// grants nothing. The same entry over a server certificate is taken: the
// refusal is the role's, not the entry's.
func TestRaftRefusesClientCertificates(t *testing.T) {
	p := newPKI(t)
	cfg := secureConfig(t, p, "s1")
	cfg.TLS.VerifyServerHostname = false // the default the attack used
	cfg.Server = nil                     // one server, bootstrapped alone
	a, _ := startAgent(t, cfg, Options{Logger: hclog.New(&hclog.LoggerOptions{Name: "s1", Level: hclog.Warn, Output: logOutput(t)})})
	defer a.Shutdown()
	const secret = "0b5e7a11-6a3e-4c0d-8000-00000000beef" // chosen by the attacker
	entry := acltest.ForgedManagementToken(t, secret)
	raftAddr := a.Cluster.RaftAddr()
	before := a.Cluster.LastIndex()

	client := p.holder(t, tlsutil.CertRequest{Kind: tlsutil.KindClient}, "cli")
	node := p.holder(t, tlsutil.CertRequest{Kind: tlsutil.KindClient, Node: "n1"}, "node")
	for name, h := range map[string]*tlsutil.Holder{"client": client, "node": node} {
		if resp, err := testutil.AppendAsPeer(raftAddr, h.ClientConfig(), entry); err == nil {
			t.Fatalf("%s certificate: raft answered %+v", name, resp)
		}
	}
	if _, err := a.ACL.Resolve(secret); err == nil {
		t.Fatal("the forged token resolves after a client certificate's AppendEntries")
	}
	if !a.Cluster.IsLeader() || a.Cluster.LastIndex() != before {
		t.Fatalf("leader %v, last index %d -> %d: the refused peer changed raft", a.Cluster.IsLeader(), before, a.Cluster.LastIndex())
	}

	// A server certificate is a raft peer: the same entry is appended.
	server := p.holder(t, tlsutil.CertRequest{Kind: tlsutil.KindServer}, "srv")
	if resp, err := testutil.AppendAsPeer(raftAddr, server.ClientConfig(), entry); err != nil || !resp.Success {
		t.Fatalf("server certificate: %+v, %v", resp, err)
	}
	testutil.WaitFor(t, "the server peer's entry applied", func() bool {
		_, err := a.ACL.Resolve(secret)
		return err == nil
	})
}

// startSecureNodeServer starts one server with mutual TLS from p's CA and
// ACLs on, bootstrapped alone and listening for node agents, and
// bootstraps its ACLs: the setup of the node certificate tests. It
// returns the agent (the caller shuts it down) and the management secret.
func startSecureNodeServer(ctx context.Context, t *testing.T, p *testPKI) (*Agent, string) {
	t.Helper()
	cfg := secureConfig(t, p, "s1")
	cfg.Server = nil
	cfg.NodeRPC = &NodeRPCConfig{Address: "127.0.0.1:0"}
	a, _ := startAgent(t, cfg, Options{Logger: hclog.New(&hclog.LoggerOptions{Name: "s1", Level: hclog.Warn, Output: logOutput(t)})})
	_, mgmt, err := a.ACL.Bootstrap(ctx)
	if err != nil {
		a.Shutdown()
		t.Fatal(err)
	}
	return a, mgmt
}

// A node agent's certificate that names a node may act as that node only,
// whatever its token grants; one naming no node leaves it to the token.
func TestNodeCertificateBoundToItsNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := newPKI(t)
	a, mgmt := startSecureNodeServer(ctx, t, p)
	defer a.Shutdown()
	leaf := func(req tlsutil.CertRequest, name string) *x509.Certificate {
		return p.holder(t, req, name).Certificate().Leaf
	}
	n1 := leaf(tlsutil.CertRequest{Kind: tlsutil.KindClient, Node: "n1"}, "n1")
	generic := leaf(tlsutil.CertRequest{Kind: tlsutil.KindClient}, "generic")
	otherRegion := leaf(tlsutil.CertRequest{Kind: tlsutil.KindClient, Node: "n1", Region: "eu"}, "eu")
	for _, c := range []struct {
		name string
		cert *x509.Certificate
		node string
		want string // "" accepts
	}{
		{"node cert, its node", n1, "n1", ""},
		{"node cert, another node", n1, "n2", `issued to node "n1", not "n2"`},
		{"generic client cert", generic, "n2", ""},
		{"node cert of another region", otherRegion, "n1", `of region "eu"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			pctx := peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{c.cert}}}})
			err := lazyAuth{a}.Authorize(pctx, mgmt, c.node)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("authorize: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// Over the wire: a node agent presenting node n1's certificate connects as
// n1, and as n2 is refused before n2 is registered, though its token is a
// management one. `volhost agent -client` refuses to start with a
// certificate of another node.
func TestNodeCertificateOverTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := newPKI(t)
	a, mgmt := startSecureNodeServer(ctx, t, p)
	defer a.Shutdown()
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	if _, err := a.Server.RegisterPlugin(ctx, &structs.Plugin{ID: "csi"}); err != nil {
		t.Fatal(err)
	}
	n1 := p.holder(t, tlsutil.CertRequest{Kind: tlsutil.KindClient, Node: "n1"}, "n1")
	run := func(nodeID string, clk clockwork.Clock) (*nodeagent.Agent, func()) {
		return runNodeAgent(ctx, t, nodeagent.Config{Servers: []string{a.NodeRPC.Addr()}, NodeID: nodeID, RootDir: t.TempDir(),
			Plugins: map[string]string{"csi": drv.Endpoint()}, Token: mgmt, Clock: clk, TLS: n1.ClientConfig()})
	}

	clk := clockwork.NewFakeClock()
	na, stop := run("n2", clk)
	// The refused session ends in the reconnect backoff, a wait on the
	// fake clock (a connected agent would be heartbeating).
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if na.Connected() != "" || a.NodeRPC.Agent("n2") != nil {
		t.Fatal("n1's certificate connected as n2")
	}
	stop()
	if n, _ := a.Store.Snapshot().NodeByID(nil, "n2"); n != nil {
		t.Fatalf("a refused agent registered its node: %+v", n)
	}

	na, stop = run("n1", clockwork.NewFakeClock())
	defer stop()
	if err := na.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForCtx(t, ctx, "the server to route n1 to its agent", func() bool { return a.NodeRPC.Agent("n1") != nil })

	ccfg := DefaultConfig()
	ccfg.Client = &ClientConfig{Enabled: true, Servers: []string{a.NodeRPC.Addr()}, NodeID: "n2", RootDir: t.TempDir(), Token: mgmt}
	ccfg.TLS = &TLSConfig{RPC: true, CAFile: filepath.Join(p.dir, "ca.pem"), CertFile: filepath.Join(p.dir, "n1.pem"), KeyFile: filepath.Join(p.dir, "n1-key.pem")}
	if err := RunClient(ctx, ccfg); err == nil || !strings.Contains(err.Error(), `was issued to node "n1", but client.node_id is "n2"`) {
		t.Fatalf("RunClient with another node's certificate: %v", err)
	}
}
