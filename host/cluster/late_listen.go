package cluster

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// A restarted server restores its last snapshot inside raft.NewRaft, before
// raft reads anything from its transport: seconds at 200,000 volumes, tens
// of seconds at a million on shared cores. Its raft port used to listen
// all that time, so the leader's append connected, was never answered and
// timed out after the transport's 10 s; raft counted a failure and backed
// off, and the server, restored, waited for the leader's next try (3.4 s
// after it listened at 200,000 volumes in TestScaleCluster). A connection
// refused is what the leader's appends already wait out cheaply
// (reach_transport.go: tried again every 50 ms, no failure counted). So
// the raft listener is opened only once raft runs: the address is bound
// first to check it and learn it (a taken port still fails the start at
// once), given back while NewRaft restores, and bound again after.
//
// A bind address with port 0 cannot be given back (another could take
// the port the kernel chose): such a listener stays open, as before. Those
// are tests and the default of a single node, which has no leader to keep
// waiting.

// lateListener is a net.Listener that accepts only once opened.
type lateListener struct {
	bind string
	addr net.Addr // the address bound first

	mu     sync.Mutex
	ln     net.Listener // nil until open (or from the start, port 0)
	closed bool
	ready  chan struct{} // closed by open (or at once, port 0)
	done   chan struct{} // closed by Close
}

// listenLate binds bind once, to fail now on a bad or taken address and to
// learn the address, and gives it back unless its port is 0.
func listenLate(bind string) (*lateListener, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	l := &lateListener{bind: bind, addr: ln.Addr(), ready: make(chan struct{}), done: make(chan struct{})}
	if _, port, err := net.SplitHostPort(bind); err != nil || port == "0" || port == "" {
		l.ln = ln
		close(l.ready)
		return l, nil
	}
	if err := ln.Close(); err != nil {
		return nil, err
	}
	return l, nil
}

// open binds the address again and lets Accept return connections. It is
// a no-op once open or closed.
func (l *lateListener) open() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", l.bind)
	if err != nil {
		return fmt.Errorf("cluster: raft listener on %s: %w", l.bind, err)
	}
	l.ln = ln
	close(l.ready)
	return nil
}

// errListenerClosed is Accept's answer once the listener is closed.
var errListenerClosed = errors.New("raft listener closed")

// Accept implements net.Listener: it waits for open.
func (l *lateListener) Accept() (net.Conn, error) {
	select {
	case <-l.ready:
	case <-l.done:
		return nil, errListenerClosed
	}
	return l.ln.Accept()
}

// Close implements net.Listener.
func (l *lateListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.done)
	if l.ln != nil {
		return l.ln.Close()
	}
	return nil
}

// Addr implements net.Listener: the address bound first.
func (l *lateListener) Addr() net.Addr { return l.addr }

// tcpStream is raft's plain TCP stream layer over a lateListener (what
// raft.NewTCPTransport builds over a listener of its own).
type tcpStream struct {
	*lateListener
	adv net.Addr
}

// Addr is the advertised address.
func (s *tcpStream) Addr() net.Addr { return s.adv }

// Dial connects to a peer. A refused connection is a *net.OpError of
// "dial", which the reach transport waits out.
func (s *tcpStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return (&net.Dialer{Timeout: timeout}).Dial("tcp", string(addr))
}

// lateTransport is a network transport whose listener opens late; New
// opens it once raft runs (openLate).
type lateTransport struct {
	*raft.NetworkTransport
	ln *lateListener
}

// advertisable returns the address to advertise: advertise when given,
// else the bound one, which must name a host.
func advertisable(bound net.Addr, advertise string) (net.Addr, error) {
	adv := bound
	if advertise != "" {
		var err error
		if adv, err = net.ResolveTCPAddr("tcp", advertise); err != nil {
			return nil, structs.Invalid("advertise_raft", "%q: %v", advertise, err)
		}
	}
	if a, ok := adv.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft address %s is not advertisable: set advertise_raft", adv)
	}
	return adv, nil
}

// newTCPTransport is raft's plain TCP transport on bind, its listener
// opened late.
func newTCPTransport(bind, advertise string, cfg *raft.NetworkTransportConfig) (*lateTransport, error) {
	ln, err := listenLate(bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: transport on %s: %w", bind, err)
	}
	adv, err := advertisable(ln.Addr(), advertise)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("cluster: transport on %s: %w", bind, err)
	}
	cfg.Stream = &tcpStream{lateListener: ln, adv: adv}
	return &lateTransport{NetworkTransport: raft.NewNetworkTransportWithConfig(cfg), ln: ln}, nil
}
