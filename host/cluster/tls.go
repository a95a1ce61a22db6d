package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// NewTLSTransport is raft's network transport over mutual TLS:
// the listener on bind requires and verifies a client certificate with
// server (tlsutil.Holder.RPCServerConfig), and dials present this
// server's certificate and verify the peer with client
// (tlsutil.Holder.ClientConfig). Both configs read the current
// certificates per handshake, so a reload applies to new connections.
// Pass it as Config.Transport; the cluster closes it on Shutdown. Its
// listener opens once raft runs (late_listen.go).
func NewTLSTransport(bind, advertise string, server, client *tls.Config, logger hclog.Logger) (raft.Transport, error) {
	if server == nil || client == nil {
		return nil, errors.New("cluster: TLS transport needs a server and a client config")
	}
	ln, err := listenLate(bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: TLS transport on %s: %w", bind, err)
	}
	adv, err := advertisable(ln.Addr(), advertise)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	stream := &tlsStream{Listener: tls.NewListener(ln, server), adv: adv, client: client}
	return &lateTransport{NetworkTransport: raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: 10 * time.Second, Logger: logger,
	}), ln: ln}, nil
}

// tlsStream is a raft.StreamLayer over TLS.
type tlsStream struct {
	net.Listener
	adv    net.Addr
	client *tls.Config
}

// Addr is the advertised address.
func (s *tlsStream) Addr() net.Addr { return s.adv }

// Dial connects to a peer and completes the handshake (the peer's
// certificate is verified there) before raft writes anything.
func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", string(addr), s.client)
	if err != nil {
		return nil, fmt.Errorf("raft dial %s: %w", addr, err)
	}
	return conn, nil
}
