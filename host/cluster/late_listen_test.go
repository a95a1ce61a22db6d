package cluster

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// A server's raft port refuses connections until raft runs (its snapshot
// restored), so the leader's appends wait in the reach transport and go
// through as soon as it opens, instead of connecting to a server that does
// not answer and timing out into raft's backoff.
func TestRaftListenerRefusesUntilOpen(t *testing.T) {
	addr := freeAddr(t)
	follower, err := newTCPTransport(addr, "", &raft.NetworkTransportConfig{MaxPool: 1, Timeout: time.Second, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	if got := string(follower.LocalAddr()); got != addr {
		t.Fatalf("advertised %s, bound %s", got, addr)
	}
	go func() {
		for rpc := range follower.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
		}
	}()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the raft port accepted a connection before raft ran")
	} else if !errors.Is(err, syscall.ECONNREFUSED) || !dialFailed(err) {
		t.Fatalf("dial before open: %v, want a refused connection", err)
	}

	leader, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rt := newReachTransport(leader)
	rt.every = 5 * time.Millisecond
	defer func() { rt.stopWaiting(); rt.Close() }()
	done := appendAsync(rt, raft.ServerAddress(addr))
	select {
	case err := <-done:
		t.Fatalf("append returned before the follower's raft ran: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := follower.ln.open(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("append once the follower listened: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append still held 10s after the follower listened")
	}
}

// A bind address of port 0 cannot be given back: it listens at once. A
// taken address fails at once. Close ends a listener never opened.
func TestLateListenerEdges(t *testing.T) {
	l, err := listenLate("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second)
	if err != nil {
		t.Fatalf("port 0: %v", err)
	}
	c.Close()
	if _, err := listenLate(l.Addr().String()); err == nil {
		t.Fatal("a taken address was accepted")
	}
	l.Close()

	late, err := listenLate(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		_, err := late.Accept()
		accepted <- err
	}()
	late.Close()
	select {
	case err := <-accepted:
		if !errors.Is(err, errListenerClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still waiting 10s after Close")
	}
	if err := late.open(); err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", late.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("a closed listener was opened")
	}
}
