package testutil

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ForgedTerm is the term AppendAsPeer claims: higher than any a test
// cluster reaches, so the server steps down and takes the entries.
const ForgedTerm = 1 << 40

// AppendAsPeer plays a rogue raft peer against the raft transport at addr
// (the attack that a client certificate on raft allowed): over TLS with
// tc (the server is not checked; tc's certificate is presented), it sends
// an AppendEntries with ForgedTerm to learn the server's last index, then
// one carrying data as the next entry, committed at once. With no
// consistency check to pass (PrevLogEntry 0), a server that decodes it
// appends and applies data. It returns the second answer, or the error
// that ended the exchange.
func AppendAsPeer(addr string, tc *tls.Config, data []byte) (*raft.AppendEntriesResponse, error) {
	tc = tc.Clone()
	tc.InsecureSkipVerify, tc.VerifyConnection = true, nil //nolint:gosec // the attacker does not care who answers
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &tlsDialer{tc: tc, closed: make(chan struct{})}, MaxPool: 1, Timeout: 10 * time.Second,
		Logger: hclog.NewNullLogger(),
	})
	defer tr.Close()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte("127.0.0.1:1")}
	var probe raft.AppendEntriesResponse
	if err := tr.AppendEntries("", raft.ServerAddress(addr), &raft.AppendEntriesRequest{
		RPCHeader: hdr, Term: ForgedTerm, PrevLogEntry: 1 << 62, PrevLogTerm: ForgedTerm,
	}, &probe); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	next := probe.LastLog + 1
	var resp raft.AppendEntriesResponse
	if err := tr.AppendEntries("", raft.ServerAddress(addr), &raft.AppendEntriesRequest{
		RPCHeader: hdr, Term: ForgedTerm,
		Entries:           []*raft.Log{{Index: next, Term: ForgedTerm, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: next,
	}, &resp); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	return &resp, nil
}

// tlsDialer is the rogue peer's raft.StreamLayer: it only dials; Accept
// waits for Close (the transport's accept loop ends with it).
type tlsDialer struct {
	tc     *tls.Config
	once   sync.Once
	closed chan struct{}
}

func (d *tlsDialer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), d.tc)
}

func (d *tlsDialer) Accept() (net.Conn, error) {
	<-d.closed
	return nil, net.ErrClosed
}

func (d *tlsDialer) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

func (d *tlsDialer) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

var _ raft.StreamLayer = (*tlsDialer)(nil)
