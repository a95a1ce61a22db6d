package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"time"
)

// Kind of certificate CreateCert makes.
type Kind string

// The kinds.
const (
	KindServer Kind = "server" // server.<region>.volhost + localhost, 127.0.0.1; server and client auth
	KindClient Kind = "client" // client.<region>.volhost (+ volhost://<region>/node/<id> with Node); client auth only
)

// PEM is a certificate and its private key, PEM-encoded.
type PEM struct {
	Cert, Key []byte
}

// CreateCA makes a self-signed ECDSA P-256 CA valid for days.
func CreateCA(commonName string, days int, now time.Time) (PEM, error) {
	if days <= 0 {
		return PEM{}, fmt.Errorf("tls: days must be positive, got %d", days)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, fmt.Errorf("tls: generate CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return PEM{}, err
	}
	if commonName == "" {
		commonName = "volhost agent CA"
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"volhost"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.AddDate(0, 0, days),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return PEM{}, fmt.Errorf("tls: create CA: %w", err)
	}
	return encode(der, key)
}

// CertRequest says what certificate to make.
type CertRequest struct {
	Kind   Kind
	Region string
	DNS    []string // added to the default names
	IPs    []net.IP // added to the default addresses (servers: 127.0.0.1)
	// Node, for a client certificate, names the node whose agent holds
	// it: the node RPC then lets it act as that node only.
	Node    string
	Days    int
	Now     time.Time
	CA      PEM
	Comment string
}

// CreateCert makes a certificate signed by the CA.
func CreateCert(req CertRequest) (PEM, error) {
	if req.Days <= 0 {
		return PEM{}, fmt.Errorf("tls: days must be positive, got %d", req.Days)
	}
	for _, n := range req.DNS {
		// Names under .volhost are roles (role.go): a client certificate
		// naming server.<region>.volhost would be a raft peer.
		if n == "volhost" || strings.HasSuffix(strings.ToLower(strings.TrimSuffix(n, ".")), ".volhost") {
			return PEM{}, fmt.Errorf("tls: additional name %q is under .volhost, which names certificate roles; give the role with -server or -client", n)
		}
	}
	if req.Node != "" && req.Kind != KindClient {
		return PEM{}, fmt.Errorf("tls: a node name is for client certificates (node agents), not %s ones", req.Kind)
	}
	caCert, caKey, err := parseCA(req.CA)
	if err != nil {
		return PEM{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, fmt.Errorf("tls: generate key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return PEM{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    req.Now.Add(-time.Minute),
		NotAfter:     req.Now.AddDate(0, 0, req.Days),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	switch req.Kind {
	case KindServer:
		tmpl.Subject = pkix.Name{CommonName: ServerName(req.Region)}
		tmpl.DNSNames = append([]string{ServerName(req.Region), "localhost"}, req.DNS...)
		tmpl.IPAddresses = append([]net.IP{net.IPv4(127, 0, 0, 1)}, req.IPs...)
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case KindClient:
		tmpl.Subject = pkix.Name{CommonName: ClientName(req.Region)}
		tmpl.DNSNames = append([]string{ClientName(req.Region)}, req.DNS...)
		tmpl.IPAddresses = req.IPs
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		if req.Node != "" {
			tmpl.URIs = []*url.URL{NodeURI(req.Region, req.Node)}
		}
	default:
		return PEM{}, fmt.Errorf("tls: unknown certificate kind %q (want server or client)", req.Kind)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return PEM{}, fmt.Errorf("tls: create certificate: %w", err)
	}
	return encode(der, key)
}

func parseCA(ca PEM) (*x509.Certificate, any, error) {
	cb, _ := pem.Decode(ca.Cert)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("tls: the CA file holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, nil, errors.New("tls: the CA certificate is not a CA")
	}
	kb, _ := pem.Decode(ca.Key)
	if kb == nil {
		return nil, nil, errors.New("tls: the CA key file holds no PEM key")
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		k8, err8 := x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err8 != nil {
			return nil, nil, fmt.Errorf("tls: parse CA key: %w", err)
		}
		return cert, k8, nil
	}
	return cert, key, nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("tls: serial number: %w", err)
	}
	return n, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (PEM, error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return PEM{}, fmt.Errorf("tls: encode key: %w", err)
	}
	return PEM{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}
