package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/host/tlsutil"
)

// Default file names, in the working directory (as Nomad names its own).
const (
	caCertFile = "volhost-agent-ca.pem"
	caKeyFile  = "volhost-agent-ca-key.pem"
)

func tlsFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// writeNew writes files that must not exist yet: a CA or a key is never
// overwritten by accident.
func writeNew(files map[string][]byte, keys map[string]bool) error {
	for path := range files {
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("%s already exists; move it away first", path)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	for path, b := range files {
		mode := os.FileMode(0o644)
		if keys[path] {
			mode = 0o600
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// TLSCACreateCommand is `volhost tls ca create`.
type TLSCACreateCommand struct{ *Meta }

func (c *TLSCACreateCommand) Synopsis() string {
	return "Create a certificate authority for volhost agents"
}
func (c *TLSCACreateCommand) Help() string {
	return `Usage: volhost tls ca create [options]

  Create a CA (ECDSA P-256) in the working directory: ` + caCertFile + `
  and ` + caKeyFile + ` (mode 0600). Existing files are never overwritten.
  Keep the key offline: whoever holds it can mint server certificates.

Options:

  -days=<n>
    How long the CA is valid. Default: 1825 (five years).

  -common-name=<name>
    The CA's common name. Default: "volhost agent CA".`
}

func (c *TLSCACreateCommand) Run(args []string) int {
	fs := tlsFlags("tls ca create")
	days := fs.Int("days", 1825, "")
	cn := fs.String("common-name", "", "")
	if err := fs.Parse(args); err != nil {
		return c.fail(fmt.Errorf("%v (usage: volhost tls ca create [options])", err))
	}
	if fs.NArg() > 0 {
		return c.fail(fmt.Errorf("unexpected argument %q (usage: volhost tls ca create [options])", fs.Arg(0)))
	}
	ca, err := tlsutil.CreateCA(*cn, *days, time.Now())
	if err != nil {
		return c.fail(err)
	}
	if err := writeNew(map[string][]byte{caCertFile: ca.Cert, caKeyFile: ca.Key}, map[string]bool{caKeyFile: true}); err != nil {
		return c.fail(err)
	}
	c.Ui.Output("==> CA certificate saved to: " + caCertFile)
	c.Ui.Output("==> CA certificate key saved to: " + caKeyFile)
	return 0
}

// TLSCertCreateCommand is `volhost tls cert create -server|-client`.
type TLSCertCreateCommand struct{ *Meta }

func (c *TLSCertCreateCommand) Synopsis() string { return "Create a server or client certificate" }
func (c *TLSCertCreateCommand) Help() string {
	return `Usage: volhost tls cert create -server|-client [options]

  Create a certificate signed by the CA, in the working directory:
  <region>-server-volhost.pem and -key.pem (named server.<region>.volhost,
  localhost and 127.0.0.1; valid for server and client authentication,
  since servers also dial each other), or <region>-client-volhost-N.pem
  (client.<region>.volhost, client authentication only). Existing files
  are never overwritten.

  The name is the certificate's role: raft and every server-to-server
  call take only server certificates; the CLI and node agents use client
  ones. Give each node agent its own certificate with -node, so it may
  connect as that node only.

Options:

  -server, -client
    Which kind of certificate (exactly one).

  -node=<node ID>
    With -client: the node whose agent holds the certificate (written
    as the URI volhost://<region>/node/<node ID>).

  -ca=<file>, -key=<file>
    The CA certificate and key. Default: ` + caCertFile + `,
    ` + caKeyFile + `.

  -region=<name>
    The region in the certificate's name. Default: global.

  -additional-dnsname=<name>, -additional-ipaddress=<ip>
    More names or addresses the server is reached at (repeatable).

  -days=<n>
    How long the certificate is valid. Default: 365.`
}

func (c *TLSCertCreateCommand) Run(args []string) int {
	fs := tlsFlags("tls cert create")
	server := fs.Bool("server", false, "")
	clientKind := fs.Bool("client", false, "")
	caPath := fs.String("ca", caCertFile, "")
	keyPath := fs.String("key", caKeyFile, "")
	region := fs.String("region", tlsutil.DefaultRegion, "")
	days := fs.Int("days", 365, "")
	node := fs.String("node", "", "")
	var dns, ips stringList
	fs.Var(&dns, "additional-dnsname", "")
	fs.Var(&ips, "additional-ipaddress", "")
	const usage = "usage: volhost tls cert create -server|-client [options]"
	if err := fs.Parse(args); err != nil {
		return c.fail(fmt.Errorf("%v (%s)", err, usage))
	}
	if fs.NArg() > 0 {
		return c.fail(fmt.Errorf("unexpected argument %q (%s)", fs.Arg(0), usage))
	}
	if *server == *clientKind {
		return c.fail(fmt.Errorf("give exactly one of -server and -client (%s)", usage))
	}
	if *node != "" {
		if err := structs.ValidateID("-node", *node); err != nil {
			return c.fail(fmt.Errorf("-node: %w", err))
		}
	}
	var addrs []net.IP
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return c.fail(fmt.Errorf("-additional-ipaddress %q is not an IP address", s))
		}
		addrs = append(addrs, ip)
	}
	caCert, err := os.ReadFile(*caPath)
	if err != nil {
		return c.fail(fmt.Errorf("read CA certificate (create one with volhost tls ca create): %w", err))
	}
	caKey, err := os.ReadFile(*keyPath)
	if err != nil {
		return c.fail(fmt.Errorf("read CA key: %w", err))
	}
	kind := tlsutil.KindClient
	if *server {
		kind = tlsutil.KindServer
	}
	p, err := tlsutil.CreateCert(tlsutil.CertRequest{Kind: kind, Region: *region, DNS: dns, IPs: addrs, Node: *node,
		Days: *days, Now: time.Now(), CA: tlsutil.PEM{Cert: caCert, Key: caKey}})
	if err != nil {
		return c.fail(err)
	}
	base := fmt.Sprintf("%s-%s-volhost", *region, kind)
	if kind == tlsutil.KindClient {
		// Several clients: number them like Nomad does.
		for i := 0; ; i++ {
			b := fmt.Sprintf("%s-%d", base, i)
			if _, err := os.Stat(b + ".pem"); errors.Is(err, os.ErrNotExist) {
				base = b
				break
			}
		}
	}
	certPath, keyOut := base+".pem", base+"-key.pem"
	if err := writeNew(map[string][]byte{certPath: p.Cert, keyOut: p.Key}, map[string]bool{keyOut: true}); err != nil {
		return c.fail(err)
	}
	c.Ui.Output("==> Using CA file " + filepath.Clean(*caPath) + " and CA key " + filepath.Clean(*keyPath))
	c.Ui.Output("==> Certificate saved to: " + certPath)
	c.Ui.Output("==> Certificate key saved to: " + keyOut)
	return 0
}
