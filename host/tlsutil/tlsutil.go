// Package tlsutil owns volhost's TLS: loading the CA, a
// certificate and its key from files, reloading them (SIGHUP) without a
// restart, the tls.Configs of the HTTPS API, the mutual-TLS raft transport
// and the clients, and creating a CA and certificates for `volhost tls`.
//
// Servers are named server.<region>.volhost (region "global" by default)
// and clients client.<region>.volhost, as Nomad does. Every server's
// certificate is valid for both server and client authentication, since a
// server dials its peers (raft) and the leader (join, forwarding).
// The name is the certificate's role (role.go): raft takes only servers,
// and every dial to a server checks that the peer is one, whatever the
// configuration says.
//
// Configs never capture a certificate or a CA pool: they read the holder
// on every handshake (GetCertificate, GetClientCertificate,
// GetConfigForClient, VerifyConnection), so a reload takes effect for the
// next connection and connections already open keep working.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// DefaultRegion names servers when no region is configured.
const DefaultRegion = "global"

// ServerName is the name every server's certificate carries.
func ServerName(region string) string {
	if region == "" {
		region = DefaultRegion
	}
	return "server." + region + ".volhost"
}

// ClientName is the name client certificates carry.
func ClientName(region string) string {
	if region == "" {
		region = DefaultRegion
	}
	return "client." + region + ".volhost"
}

// Config names the files and the checks.
type Config struct {
	CAFile   string
	CertFile string
	KeyFile  string
	Region   string
	// VerifyHTTPSClient: the HTTPS API requires a client certificate
	// signed by the CA. Without it a certificate is checked when given
	// (the API's tokens decide what a caller may do).
	VerifyHTTPSClient bool
}

// material is one loaded generation of files.
type material struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

// Holder keeps the current certificate and CA pool; Reload swaps them.
type Holder struct {
	cfg Config
	cur atomic.Pointer[material]
}

// Load reads the files of cfg. The CA, certificate and key are all
// required; the certificate must chain to the CA.
func Load(cfg Config) (*Holder, error) {
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	h := &Holder{cfg: cfg}
	if err := h.Reload(); err != nil {
		return nil, err
	}
	return h, nil
}

// Reload reads the files again and swaps them in. On any error the
// previous certificate and CA keep serving and the error says why.
func (h *Holder) Reload() error {
	m, err := load(h.cfg)
	if err != nil {
		return err
	}
	h.cur.Store(m)
	return nil
}

func load(cfg Config) (*material, error) {
	switch {
	case cfg.CAFile == "":
		return nil, errors.New("tls: ca_file is required")
	case cfg.CertFile == "" || cfg.KeyFile == "":
		return nil, errors.New("tls: cert_file and key_file are required")
	}
	caPEM, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("tls: read ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls: ca_file %s holds no PEM certificate", cfg.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load cert_file %s and key_file %s: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tls: parse cert_file %s: %w", cfg.CertFile, err)
	}
	cert.Leaf = leaf
	inter := x509.NewCertPool()
	for _, c := range cert.Certificate[1:] {
		if ic, err := x509.ParseCertificate(c); err == nil {
			inter.AddCert(ic)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("tls: cert_file %s is not signed by ca_file %s: %w", cfg.CertFile, cfg.CAFile, err)
	}
	return &material{cert: &cert, pool: pool}, nil
}

// Region is the configured region.
func (h *Holder) Region() string { return h.cfg.Region }

// Certificate is the current certificate (its Leaf is parsed).
func (h *Holder) Certificate() *tls.Certificate { return h.cur.Load().cert }

// HTTPServerConfig is the HTTPS API's config: a client certificate is
// required with VerifyHTTPSClient, otherwise verified when given. Any
// role may connect; the API's tokens decide what it may do, and only a
// server certificate stands in for a token (IsServer, at join).
func (h *Holder) HTTPServerConfig() *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if h.cfg.VerifyHTTPSClient {
		auth = tls.RequireAndVerifyClientCert
	}
	return h.serverConfig(auth, nil)
}

// RPCServerConfig is the raft transport's listener config: mutual TLS,
// and the peer must hold a server certificate, always. A raft peer can
// commit any entry, so no setting turns this off: a client certificate
// (every node agent and operator has one) fails the handshake, before
// raft reads a byte.
func (h *Holder) RPCServerConfig() *tls.Config {
	return h.serverConfig(tls.RequireAndVerifyClientCert, []Role{RoleServer})
}

// NodeRPCServerConfig is the node RPC listener's config: mutual TLS, and
// the peer must hold a client (node agent) or server certificate of this
// region. Which node a connection may act as is checked per stream
// against the certificate's node name and the token (host/agent).
func (h *Holder) NodeRPCServerConfig() *tls.Config {
	return h.serverConfig(tls.RequireAndVerifyClientCert, []Role{RoleClient, RoleServer})
}

// serverConfig serves the current certificate; with roles, a peer whose
// verified certificate holds none of them fails the handshake.
func (h *Holder) serverConfig(auth tls.ClientAuthType, roles []Role) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := h.cur.Load()
		c := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{*m.cert},
			ClientAuth:   auth,
			ClientCAs:    m.pool,
		}
		if roles != nil {
			region := h.cfg.Region
			c.VerifyConnection = func(cs tls.ConnectionState) error {
				// crypto/tls verified the chain against ClientCAs before
				// this runs (RequireAndVerifyClientCert).
				if len(cs.VerifiedChains) == 0 {
					return errors.New("tls: the peer's certificate is not verified")
				}
				return requireRole(cs.PeerCertificates, region, "this listener", roles...)
			}
		}
		return c, nil
	}
	return base
}

// ClientConfig is the config for dialing a server (raft, join, request
// forwarding, the probe of a joining server, a node agent's stream): the
// current certificate is presented, and the peer must chain to the
// current CA and hold a server certificate of this region, always. A
// client certificate cannot pose as a server to a dialing peer: it would
// receive raft entries, forwarded tokens, or drive a node agent's steps.
func (h *Holder) ClientConfig() *tls.Config {
	return ClientConfigFor(h.current, h.cfg.Region)
}

func (h *Holder) current() (*tls.Certificate, *x509.CertPool) {
	m := h.cur.Load()
	return m.cert, m.pool
}

// ClientConfigFor builds a config that dials a server of region over a
// source of the current certificate (may be nil: none presented) and CA
// pool. The chain is verified by hand (crypto/tls cannot read a pool that
// changes) and the peer must hold a server certificate.
func ClientConfigFor(src func() (*tls.Certificate, *x509.CertPool), region string) *tls.Config {
	if region == "" {
		region = DefaultRegion
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification happens in VerifyConnection with the current pool.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := src()
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool := src()
			return verifyServer(cs, pool, region)
		},
	}
}

// verifyServer checks the peer's chain against pool, for server
// authentication, and that the leaf holds a server certificate of region.
func verifyServer(cs tls.ConnectionState, pool *x509.CertPool, region string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("tls: server certificate: %w", err)
	}
	return requireRole(cs.PeerCertificates, region, "a server dial", RoleServer)
}

// IsServer reports whether a connection's client presented a certificate
// verified against the CA that holds the server role: the identity a
// raft join accepts in place of a management token.
func (h *Holder) IsServer(cs *tls.ConnectionState) bool {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return false
	}
	return RoleOf(cs.PeerCertificates[0], h.cfg.Region) == RoleServer
}

// ClientFiles is the CLI's config: the server is verified against the CA
// file and the address's host name (standard verification); the client
// certificate and key, when given, are presented.
func ClientFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		caPEM, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("tls: read CA certificate: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("tls: %s holds no PEM certificate", caFile)
		}
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: load client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("tls: give both the client certificate and its key")
	}
	return c, nil
}
