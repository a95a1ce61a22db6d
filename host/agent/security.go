package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/tlsutil"
)

// setupTLS loads the certificates and, with tls.rpc, puts raft on the
// mutual-TLS transport.
func (a *Agent) setupTLS(cc *cluster.Config) error {
	t := a.cfg.TLS
	if !a.cfg.Dev && (t == nil || !t.RPC) {
		// Raft peers write the state unchecked: ACL tokens, claims, fences.
		a.logger.Warn("INSECURE: raft without tls.rpc: whoever reaches " + cc.BindAddr + " can append to the replicated log (ACL tokens included); set tls { rpc = true } with server certificates")
	}
	if t == nil || (!t.HTTP && !t.RPC) {
		return nil
	}
	h, err := tlsutil.Load(tlsutil.Config{
		CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, Region: a.cfg.Region,
		VerifyHTTPSClient: t.VerifyHTTPSClient,
	})
	if err != nil {
		return err
	}
	a.TLS = h
	if role := tlsutil.RoleOf(h.Certificate().Leaf, h.Region()); role != tlsutil.RoleServer {
		// Its peers would refuse it on raft, and its joins would fail
		// later with a less clear error.
		return fmt.Errorf("tls: cert_file %s is a %s certificate, not a server certificate of region %q: a server needs one made by volhost tls cert create -server -region %s",
			t.CertFile, role, h.Region(), h.Region())
	}
	if t.RPC && !a.cfg.Dev {
		tr, err := cluster.NewTLSTransport(cc.BindAddr, cc.AdvertiseAddr, h.RPCServerConfig(), h.ClientConfig(), a.logger.Named("raft"))
		if err != nil {
			return err
		}
		cc.Transport, a.rpcTransport = tr, tr
	}
	return nil
}

// setupProbe lets the leader tell live servers from fake ones before a
// join or a removal changes the quorum.
// A transport a test put in place (in memory) gets no probe.
func (a *Agent) setupProbe(cc cluster.Config) {
	switch {
	case cc.Dev && cc.Transport == nil:
		// In memory: no other server can ever reach this one, so any
		// join is bogus (an anonymous join once added a fake voter to -dev:
		// TestJoinAttackRefused).
		a.Cluster.SetProbe(func(context.Context, string) error {
			return errors.New("this agent runs -dev: its raft transport is in memory and no server can join it")
		})
	case cc.Transport != nil && cc.Transport == a.rpcTransport:
		a.Cluster.SetProbe(cluster.TLSProbe(a.TLS.ClientConfig()))
	case cc.Transport == nil:
		a.Cluster.SetProbe(cluster.TCPProbe)
	}
}

// setupACL turns on access control on the API.
func (a *Agent) setupACL() {
	if a.cfg.ACL == nil || !a.cfg.ACL.Enabled {
		return
	}
	a.ACL = acl.NewService(a.Store, a.Cluster, a.clock)
	ac := api.ACLConfig{Service: a.ACL, Audit: a.Cluster}
	if a.TLS != nil && a.cfg.TLS.HTTP {
		ac.ServerIdentity = a.TLS.IsServer
	}
	a.API.EnableACL(ac)
}

// ReloadTLS re-reads the certificate files (SIGHUP). A bad file is an
// error and the previous certificates keep serving.
func (a *Agent) ReloadTLS() error {
	if a.TLS == nil {
		return nil
	}
	if err := a.TLS.Reload(); err != nil {
		return fmt.Errorf("tls reload: %w", err)
	}
	a.logger.Info("TLS certificates reloaded", "serial", a.TLS.Certificate().Leaf.SerialNumber.String())
	return nil
}

// joinAddrs adds https:// to join addresses without a scheme when the API
// serves HTTPS.
func (a *Agent) joinAddrs(addrs []string) []string {
	if a.TLS == nil || !a.cfg.TLS.HTTP {
		return addrs
	}
	out := make([]string, len(addrs))
	for i, ad := range addrs {
		if !strings.Contains(ad, "://") {
			ad = "https://" + ad
		}
		out[i] = ad
	}
	return out
}

// joinClient is the HTTP client a joining server asks with: its server
// certificate over HTTPS, and the join token when one is configured.
func (a *Agent) joinClient() *http.Client {
	tr := &http.Transport{}
	if a.TLS != nil && a.cfg.TLS.HTTP {
		tr.TLSClientConfig = a.TLS.ClientConfig()
	}
	var rt http.RoundTripper = tr
	if tok := a.cfg.Server.JoinToken; tok != "" {
		rt = tokenTransport{next: tr, token: tok}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: rt}
}

type tokenTransport struct {
	next  http.RoundTripper
	token string
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(api.TokenHeader, t.token)
	return t.next.RoundTrip(r)
}
