package tlsutil

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Role is what a certificate of the cluster CA may do. It is read from
// the certificate's subject alternative names, exactly as `volhost tls
// cert create` writes them, never from the common name (which X.509 name
// checks ignore and anyone asking a CA to sign may choose).
//
// Every certificate of the CA proves only that the CA signed it. Before
// roles, the raft listener took any of them, so the client certificate
// given to every node agent and operator could send AppendEntries with a
// higher term and commit a management token: the role decides which
// interface a certificate may reach.
type Role int

// The roles.
const (
	// RoleNone: a certificate of the CA that names no role of this region
	// (another region's, or one made by hand). It reaches only the HTTPS
	// API, where tokens decide.
	RoleNone Role = iota
	// RoleClient: client.<region>.volhost, for the CLI and node agents.
	// A node certificate is a client certificate that also names its node.
	RoleClient
	// RoleServer: server.<region>.volhost with server authentication in
	// its extended key usage: a raft peer.
	RoleServer
)

func (r Role) String() string {
	switch r {
	case RoleServer:
		return "server"
	case RoleClient:
		return "client"
	default:
		return "none"
	}
}

// RoleOf is the role of leaf, a certificate already verified against the
// CA, in region. The name must be one of leaf's DNS names exactly: a
// wildcard such as *.<region>.volhost names no role.
func RoleOf(leaf *x509.Certificate, region string) Role {
	switch {
	case leaf == nil:
		return RoleNone
	case slices.Contains(leaf.DNSNames, ServerName(region)) &&
		(len(leaf.ExtKeyUsage) == 0 || slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) ||
			slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny)):
		return RoleServer
	case slices.Contains(leaf.DNSNames, ClientName(region)):
		return RoleClient
	}
	return RoleNone
}

// requireRole checks that a verified peer certificate has one of roles.
func requireRole(peers []*x509.Certificate, region, iface string, roles ...Role) error {
	if len(peers) == 0 {
		return fmt.Errorf("tls: %s: the peer presented no certificate", iface)
	}
	got := RoleOf(peers[0], region)
	if slices.Contains(roles, got) {
		return nil
	}
	want := make([]string, len(roles))
	for i, r := range roles {
		want[i] = r.String()
	}
	is := "names no role"
	if got != RoleNone {
		is = "is a " + got.String() + " certificate"
	}
	return fmt.Errorf("tls: %s accepts only %s certificates of region %q; the peer's (%s) %s",
		iface, strings.Join(want, " or "), region, describe(peers[0]), is)
}

// describe names a certificate in an error: its DNS names, or its common
// name when it has none.
func describe(c *x509.Certificate) string {
	if len(c.DNSNames) > 0 {
		return strings.Join(c.DNSNames, ", ")
	}
	return "CN=" + c.Subject.CommonName
}

// nodeURIScheme and the path prefix below make a node certificate's URI
// name: volhost://<region>/node/<node ID, path-escaped>. A URI carries any
// node ID (GCE's contain slashes) where a DNS name could not.
const (
	nodeURIScheme = "volhost"
	nodeURIPrefix = "/node/"
)

// NodeURI is the URI name a node certificate of region carries for node.
func NodeURI(region, node string) *url.URL {
	if region == "" {
		region = DefaultRegion
	}
	return &url.URL{Scheme: nodeURIScheme, Host: region, Path: nodeURIPrefix + node}
}

// NodeOf is the node a certificate was issued to ("" for a certificate
// naming no node: a generic client or a server). A certificate naming two
// nodes, or a node of another region, is an error: it must not be taken
// as either.
func NodeOf(leaf *x509.Certificate, region string) (string, error) {
	if region == "" {
		region = DefaultRegion
	}
	node := ""
	for _, u := range leaf.URIs {
		if u.Scheme != nodeURIScheme || !strings.HasPrefix(u.Path, nodeURIPrefix) {
			continue
		}
		if u.Host != region {
			return "", fmt.Errorf("tls: the certificate names node %q of region %q, not of %q", strings.TrimPrefix(u.Path, nodeURIPrefix), u.Host, region)
		}
		if node != "" {
			return "", errors.New("tls: the certificate names more than one node")
		}
		node = strings.TrimPrefix(u.Path, nodeURIPrefix)
		if node == "" {
			return "", errors.New("tls: the certificate's node name is empty")
		}
	}
	return node, nil
}
