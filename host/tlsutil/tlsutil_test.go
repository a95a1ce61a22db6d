package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki writes a CA and a certificate of kind under dir and returns the files.
func pki(t *testing.T, dir string, kind Kind, region string) (ca PEM, cfg Config) {
	t.Helper()
	now := time.Now()
	ca, err := CreateCA("test CA", 1, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := CreateCert(CertRequest{Kind: kind, Region: region, Days: 1, Now: now, CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	cfg = Config{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"), Region: region}
	write(t, cfg.CAFile, ca.Cert)
	write(t, filepath.Join(dir, "ca-key.pem"), ca.Key)
	write(t, cfg.CertFile, cert.Cert)
	write(t, cfg.KeyFile, cert.Key)
	return ca, cfg
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// handshake runs one TLS handshake between the configs over a pipe and
// returns both sides' errors and the server's view of the connection.
func handshake(t *testing.T, server, client *tls.Config) (cs tls.ConnectionState, srvErr, cliErr error) {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := tls.Server(a, server)
		srvErr = s.Handshake()
		cs = s.ConnectionState()
		if srvErr == nil {
			_, _ = io.Copy(io.Discard, s)
		}
		a.Close()
	}()
	c := tls.Client(b, client)
	cliErr = c.Handshake()
	b.Close()
	<-done
	return cs, srvErr, cliErr
}

func TestMutualTLSRolesAndForeignCA(t *testing.T) {
	dir := t.TempDir()
	_, scfg := pki(t, dir, KindServer, "")
	srv, err := Load(scfg)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(scfg.CAFile)
	ca := PEM{Cert: caPEM, Key: mustCAKey(t, dir)}
	peer, client := holderOf(t, scfg.CAFile, mustCert(t, CertRequest{Kind: KindServer, CA: ca})),
		holderOf(t, scfg.CAFile, mustCert(t, CertRequest{Kind: KindClient, CA: ca}))

	// Server to server: both sides verify, the listener sees a server.
	cs, se, ce := handshake(t, srv.RPCServerConfig(), peer.ClientConfig())
	if se != nil || ce != nil || !srv.IsServer(&cs) {
		t.Fatalf("server to server: %v / %v, is server %v", se, ce, srv.IsServer(&cs))
	}
	// A client certificate of the same CA cannot pose as a server on raft,
	// with no setting at all (verify_server_hostname is gone).
	if _, se, _ := handshake(t, srv.RPCServerConfig(), client.ClientConfig()); se == nil || !strings.Contains(se.Error(), "accepts only server certificates") {
		t.Fatalf("client cert on raft: %v, want refused as not a server", se)
	}
	// Nor can a client answer a server's dial as if it were one, even
	// with a certificate good for server authentication.
	poser := holderOf(t, scfg.CAFile, sign(t, ca, x509.Certificate{DNSNames: []string{"client.global.volhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}))
	if _, _, ce := handshake(t, poser.HTTPServerConfig(), srv.ClientConfig()); ce == nil || !strings.Contains(ce.Error(), "is a client certificate") {
		t.Fatalf("dialing a client cert posing as a server: %v, want refused", ce)
	}
	// The node RPC takes a client certificate and a server's.
	if _, se, ce := handshake(t, srv.NodeRPCServerConfig(), client.ClientConfig()); se != nil || ce != nil {
		t.Fatalf("client cert on node rpc: %v / %v", se, ce)
	}
	// The HTTPS API takes it, but it is no server identity.
	if cs, se, ce := handshake(t, srv.HTTPServerConfig(), client.ClientConfig()); se != nil || ce != nil || srv.IsServer(&cs) {
		t.Fatalf("client cert on https: %v / %v, server %v", se, ce, srv.IsServer(&cs))
	}
	// A server of another CA is refused both ways.
	_, fcfg := pki(t, t.TempDir(), KindServer, "")
	foreign, err := Load(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, se, ce := handshake(t, srv.RPCServerConfig(), foreign.ClientConfig()); se == nil && ce == nil {
		t.Fatal("a server of a foreign CA completed a handshake")
	}
	if _, _, ce := handshake(t, foreign.RPCServerConfig(), srv.ClientConfig()); ce == nil {
		t.Fatal("dialing a server of a foreign CA succeeded")
	}
}

// Only the subject alternative names of a certificate of this CA and
// region carry the server role: a common name, a wildcard, another
// region's name, a client's key usage or another CA's signature do not.
func TestRaftListenerRefusesForgedServers(t *testing.T) {
	dir := t.TempDir()
	_, scfg := pki(t, dir, KindServer, "")
	srv, err := Load(scfg)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(scfg.CAFile)
	ca := PEM{Cert: caPEM, Key: mustCAKey(t, dir)}
	foreignCA, err := CreateCA("volhost agent CA", 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, c := range []struct {
		name string
		ca   PEM
		tmpl x509.Certificate
		want string // the listener's error; "" accepts
	}{
		{"the CLI's server certificate", ca, x509.Certificate{Subject: pkix.Name{CommonName: "server.global.volhost"}, DNSNames: []string{"server.global.volhost"}, ExtKeyUsage: both}, ""},
		{"server name in the common name only", ca, x509.Certificate{Subject: pkix.Name{CommonName: "server.global.volhost"}, DNSNames: []string{"client.global.volhost"}, ExtKeyUsage: both}, "is a client certificate"},
		{"server name without a SAN", ca, x509.Certificate{Subject: pkix.Name{CommonName: "server.global.volhost"}, ExtKeyUsage: both}, "names no role"},
		{"wildcard", ca, x509.Certificate{DNSNames: []string{"*.global.volhost"}, ExtKeyUsage: both}, "names no role"},
		{"another region's server", ca, x509.Certificate{DNSNames: []string{"server.eu.volhost"}, ExtKeyUsage: both}, "names no role"},
		{"server name, client usage only", ca, x509.Certificate{DNSNames: []string{"server.global.volhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, "names no role"},
		{"server name signed by another CA", foreignCA, x509.Certificate{Subject: pkix.Name{CommonName: "server.global.volhost"}, DNSNames: []string{"server.global.volhost"}, ExtKeyUsage: both}, "certificate signed by unknown authority"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := holderOf(t, writeTemp(t, c.ca.Cert), sign(t, c.ca, c.tmpl))
			_, se, _ := handshake(t, srv.RPCServerConfig(), unchecked(h))
			switch {
			case c.want == "" && se != nil:
				t.Fatalf("refused: %v", se)
			case c.want != "" && (se == nil || !strings.Contains(se.Error(), c.want)):
				t.Fatalf("listener: %v, want an error containing %q", se, c.want)
			}
		})
	}
}

// A client certificate's handshake with the raft listener fails before
// the listener reads a byte the client wrote: whatever raft would decode
// never reaches it.
func TestRaftListenerClosesBeforeReading(t *testing.T) {
	dir := t.TempDir()
	_, scfg := pki(t, dir, KindServer, "")
	srv, err := Load(scfg)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(scfg.CAFile)
	ca := PEM{Cert: caPEM, Key: mustCAKey(t, dir)}
	client := holderOf(t, scfg.CAFile, mustCert(t, CertRequest{Kind: KindClient, CA: ca}))
	server := holderOf(t, scfg.CAFile, mustCert(t, CertRequest{Kind: KindServer, CA: ca}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tln := tls.NewListener(ln, srv.RPCServerConfig())
	type read struct {
		n   int
		err error
	}
	reads := make(chan read)
	go func() {
		for {
			conn, err := tln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64)
			n, err := conn.Read(buf)
			conn.Close()
			reads <- read{n, err}
		}
	}()
	for _, c := range []struct {
		name   string
		h      *Holder
		accept bool
	}{{"client", client, false}, {"server", server, true}} {
		conn, err := tls.Dial("tcp", ln.Addr().String(), unchecked(c.h))
		if err != nil {
			t.Fatalf("%s: dial: %v", c.name, err)
		}
		// TLS 1.3: the client's handshake ends before the server checks
		// its certificate, so the write may succeed; the server must not
		// deliver it.
		_, _ = conn.Write([]byte("raft rpc"))
		r := <-reads
		conn.Close()
		if c.accept != (r.err == nil && r.n == len("raft rpc")) {
			t.Fatalf("%s: the listener read %d bytes, error %v", c.name, r.n, r.err)
		}
	}
}

// A node certificate names its node in a URI; NodeOf reads it back, and
// CreateCert refuses role names as additional names.
func TestNodeCertificates(t *testing.T) {
	dir := t.TempDir()
	_, scfg := pki(t, dir, KindServer, "")
	caPEM, _ := os.ReadFile(scfg.CAFile)
	ca := PEM{Cert: caPEM, Key: mustCAKey(t, dir)}
	for _, node := range []string{"n1", "projects/p/zones/z/instances/i-1", "a?b#c d"} {
		h := holderOf(t, scfg.CAFile, mustCert(t, CertRequest{Kind: KindClient, Node: node, CA: ca}))
		leaf := h.Certificate().Leaf
		if got, err := NodeOf(leaf, ""); err != nil || got != node {
			t.Errorf("NodeOf(cert for %q) = %q, %v", node, got, err)
		}
		if RoleOf(leaf, "") != RoleClient {
			t.Errorf("node cert %q: role %v, want client", node, RoleOf(leaf, ""))
		}
		if _, err := NodeOf(leaf, "eu"); err == nil {
			t.Errorf("node cert %q of region global read in region eu", node)
		}
	}
	plain := holderOf(t, scfg.CAFile, mustCert(t, CertRequest{Kind: KindClient, CA: ca}))
	if got, err := NodeOf(plain.Certificate().Leaf, ""); got != "" || err != nil {
		t.Errorf("NodeOf(generic client) = %q, %v", got, err)
	}
	two := sign(t, ca, x509.Certificate{DNSNames: []string{"client.global.volhost"}, URIs: []*url.URL{NodeURI("", "a"), NodeURI("", "b")}})
	if h := holderOf(t, scfg.CAFile, two); true {
		if _, err := NodeOf(h.Certificate().Leaf, ""); err == nil || !strings.Contains(err.Error(), "more than one node") {
			t.Errorf("two nodes: %v", err)
		}
	}
	for _, req := range []CertRequest{
		{Kind: KindClient, DNS: []string{"server.global.volhost"}},
		{Kind: KindClient, DNS: []string{"Server.Global.Volhost."}},
		{Kind: KindServer, DNS: []string{"x.volhost"}},
		{Kind: KindServer, Node: "n1"},
	} {
		req.CA, req.Days, req.Now = ca, 1, time.Now()
		if _, err := CreateCert(req); err == nil {
			t.Errorf("CreateCert(%v %v node %q) succeeded", req.Kind, req.DNS, req.Node)
		}
	}
}

// unchecked is h's dialing config without the check of the peer: an
// attacker's, who wants to reach the listener whoever it is.
func unchecked(h *Holder) *tls.Config {
	c := h.ClientConfig()
	c.VerifyConnection = nil
	return c
}

func mustCert(t *testing.T, req CertRequest) PEM {
	t.Helper()
	req.Days, req.Now = 1, time.Now()
	p, err := CreateCert(req)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sign makes a certificate from tmpl (serial and validity filled in)
// signed by ca, the way someone holding a CA key by hand might.
func sign(t *testing.T, ca PEM, tmpl x509.Certificate) PEM {
	t.Helper()
	caCert, caKey, err := parseCA(ca)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p, err := encode(der, key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.pem")
	write(t, p, b)
	return p
}

// holderOf loads cert under the CA file caFile.
func holderOf(t *testing.T, caFile string, cert PEM) *Holder {
	t.Helper()
	d := t.TempDir()
	c := Config{CAFile: caFile, CertFile: filepath.Join(d, "cert.pem"), KeyFile: filepath.Join(d, "key.pem")}
	write(t, c.CertFile, cert.Cert)
	write(t, c.KeyFile, cert.Key)
	h, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustCAKey(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Reload swaps the certificate for new handshakes; a bad file keeps the
// old one serving.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	_, cfg := pki(t, dir, KindServer, "")
	h, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := h.Certificate().Leaf.SerialNumber
	caPEM, _ := os.ReadFile(cfg.CAFile)
	next, err := CreateCert(CertRequest{Kind: KindServer, Days: 1, Now: time.Now(), CA: PEM{Cert: caPEM, Key: mustCAKey(t, dir)}})
	if err != nil {
		t.Fatal(err)
	}
	write(t, cfg.CertFile, next.Cert)
	write(t, cfg.KeyFile, next.Key)
	if err := h.Reload(); err != nil {
		t.Fatal(err)
	}
	if h.Certificate().Leaf.SerialNumber.Cmp(old) == 0 {
		t.Fatal("reload kept the old certificate")
	}
	cur := h.Certificate()
	write(t, cfg.CertFile, []byte("garbage"))
	if err := h.Reload(); err == nil {
		t.Fatal("reload of a bad file succeeded")
	}
	if h.Certificate() != cur {
		t.Fatal("a failed reload replaced the certificate")
	}
	// The server config reads the holder per handshake.
	sc, err := h.HTTPServerConfig().GetConfigForClient(nil)
	if err != nil || sc.Certificates[0].Leaf.SerialNumber.Cmp(cur.Leaf.SerialNumber) != 0 {
		t.Fatalf("server config after reload: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, cfg := pki(t, dir, KindServer, "")
	_, other := pki(t, t.TempDir(), KindServer, "")
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "ca_file is required"},
		{Config{CAFile: cfg.CAFile}, "cert_file and key_file"},
		{Config{CAFile: other.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}, "not signed by"},
		{Config{CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: other.KeyFile}, "load cert_file"},
	} {
		if _, err := Load(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
	var pe *os.PathError
	if _, err := Load(Config{CAFile: filepath.Join(dir, "nope"), CertFile: "x", KeyFile: "y"}); !errors.As(err, &pe) {
		t.Errorf("missing file: %v", err)
	}
}
