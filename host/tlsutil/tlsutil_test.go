package tlsutil

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
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

func TestMutualTLSNamesAndForeignCA(t *testing.T) {
	dir := t.TempDir()
	_, scfg := pki(t, dir, KindServer, "")
	scfg.VerifyServerHostname = true
	srv, err := Load(scfg)
	if err != nil {
		t.Fatal(err)
	}
	// A second server of the same CA: reuse the CA to sign a server and a
	// client certificate.
	caPEM, _ := os.ReadFile(scfg.CAFile)
	caKey := mustCAKey(t, dir)
	peerDir := t.TempDir()
	mk := func(kind Kind) *Holder {
		cert, err := CreateCert(CertRequest{Kind: kind, Days: 1, Now: time.Now(), CA: PEM{Cert: caPEM, Key: caKey}})
		if err != nil {
			t.Fatal(err)
		}
		c := Config{CAFile: scfg.CAFile, CertFile: filepath.Join(peerDir, string(kind)+".pem"), KeyFile: filepath.Join(peerDir, string(kind)+"-key.pem"), VerifyServerHostname: true}
		write(t, c.CertFile, cert.Cert)
		write(t, c.KeyFile, cert.Key)
		h, err := Load(c)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	peer, client := mk(KindServer), mk(KindClient)

	// Server to server: both sides verify, the listener sees a server.
	cs, se, ce := handshake(t, srv.RPCServerConfig(), peer.ClientConfig())
	if se != nil || ce != nil || !srv.IsServer(&cs) {
		t.Fatalf("server to server: %v / %v, is server %v", se, ce, srv.IsServer(&cs))
	}
	// A client certificate of the same CA cannot pose as a server on raft.
	if _, se, _ := handshake(t, srv.RPCServerConfig(), client.ClientConfig()); se == nil || !strings.Contains(se.Error(), "not a server") {
		t.Fatalf("client cert on raft: %v, want refused as not a server", se)
	}
	// The HTTPS API takes it, but it is no server identity.
	if cs, se, ce := handshake(t, srv.HTTPServerConfig(), client.ClientConfig()); se != nil || ce != nil || srv.IsServer(&cs) {
		t.Fatalf("client cert on https: %v / %v, server %v", se, ce, srv.IsServer(&cs))
	}
	// A server of another CA is refused both ways.
	_, fcfg := pki(t, t.TempDir(), KindServer, "")
	fcfg.VerifyServerHostname = true
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
