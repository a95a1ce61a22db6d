package cluster

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// gatedStream is a raft stream layer whose dials fail as a refused
// connection until up is set, and report each attempt on dials.
type gatedStream struct {
	net.Listener
	up    atomic.Bool
	dials chan struct{}
}

func (s *gatedStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case s.dials <- struct{}{}:
	default:
	}
	if !s.up.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return net.DialTimeout("tcp", string(addr), timeout)
}

// reachPair is a leader-side reachTransport over a gatedStream and a
// follower transport that answers every append with respond.
func reachPair(t *testing.T, max time.Duration, respond func(*raft.RPC)) (*reachTransport, *gatedStream, raft.ServerAddress) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := &gatedStream{Listener: ln, dials: make(chan struct{}, 1)}
	nt := raft.NewNetworkTransport(gs, 1, time.Second, io.Discard)
	rt := newReachTransport(nt)
	rt.every, rt.max = 5*time.Millisecond, max
	follower, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.stopWaiting(); rt.Close(); follower.Close() })
	go func() {
		for rpc := range follower.Consumer() {
			respond(&rpc)
		}
	}()
	return rt, gs, follower.LocalAddr()
}

func appendAsync(rt *reachTransport, addr raft.ServerAddress) <-chan error {
	done := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		done <- rt.AppendEntries("f", addr, &raft.AppendEntriesRequest{Term: 1}, &resp)
	}()
	return done
}

func waitDials(t *testing.T, gs *gatedStream, n int) {
	t.Helper()
	for range n {
		select {
		case <-gs.dials:
		case <-time.After(10 * time.Second):
			t.Fatal("no dial attempt within 10s")
		}
	}
}

// An append to a follower that refuses connections is held and retried,
// and goes through once the follower accepts: raft never counts a failure
// for the downtime, so it never backs off from the returned follower.
func TestReachTransportHoldsAppendUntilFollowerIsBack(t *testing.T) {
	ok := func(rpc *raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil) }
	rt, gs, addr := reachPair(t, time.Minute, ok)
	done := appendAsync(rt, addr)
	waitDials(t, gs, 3) // refused, then retried twice: still held
	select {
	case err := <-done:
		t.Fatalf("append returned while the follower refused connections: %v", err)
	default:
	}
	gs.up.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("append after the follower came back: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append still held 10s after the follower came back")
	}
}

// Only a failed dial is retried: an error from a follower that was reached
// (here its answer) reaches raft at once, after one dial.
func TestReachTransportReturnsOtherErrors(t *testing.T) {
	refuse := func(rpc *raft.RPC) { rpc.Respond(nil, errors.New("follower says no")) }
	rt, gs, addr := reachPair(t, time.Minute, refuse)
	gs.up.Store(true)
	select {
	case err := <-appendAsync(rt, addr):
		if err == nil || dialFailed(err) {
			t.Fatalf("want the follower's error, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append with a reachable follower held")
	}
}

// A follower that stays away is reported after the wait's bound, and
// stopWaiting (the cluster's shutdown) ends a held append at once: raft's
// shutdown waits for its replication goroutines.
func TestReachTransportWaitIsBounded(t *testing.T) {
	ok := func(rpc *raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil) }
	rt, _, addr := reachPair(t, 50*time.Millisecond, ok)
	select {
	case err := <-appendAsync(rt, addr):
		if !dialFailed(err) {
			t.Fatalf("want the dial error after the bound, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append held past its bound")
	}

	rt, gs, addr := reachPair(t, time.Hour, ok)
	done := appendAsync(rt, addr)
	waitDials(t, gs, 2)
	rt.stopWaiting()
	select {
	case err := <-done:
		if !dialFailed(err) {
			t.Fatalf("want the dial error after stopWaiting, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stopWaiting did not end a held append")
	}
	// And none is held after it.
	select {
	case err := <-appendAsync(rt, addr):
		if !dialFailed(err) {
			t.Fatalf("after stopWaiting: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an append was held after stopWaiting")
	}
}

// A snapshot to a follower that refuses connections is held like an
// append, and the whole of it arrives once the follower accepts: the
// follower that returns is not left behind raft's backoff. The transport
// counts the follower unreachable while its dials fail, and reachable
// again after the first that connects.
func TestReachTransportHoldsSnapshotUntilFollowerIsBack(t *testing.T) {
	want := bytes.Repeat([]byte("state "), 10000)
	got := make(chan []byte, 1)
	receive := func(rpc *raft.RPC) {
		b, err := io.ReadAll(rpc.Reader)
		if err != nil {
			rpc.Respond(nil, err)
			return
		}
		got <- b
		rpc.Respond(&raft.InstallSnapshotResponse{Term: 1, Success: true}, nil)
	}
	rt, gs, addr := reachPair(t, time.Minute, receive)
	done := make(chan error, 1)
	go func() {
		var resp raft.InstallSnapshotResponse
		done <- rt.InstallSnapshot("f", addr, &raft.InstallSnapshotRequest{Term: 1, Size: int64(len(want))}, &resp, bytes.NewReader(want))
	}()
	waitDials(t, gs, 3)
	select {
	case err := <-done:
		t.Fatalf("the snapshot returned while the follower refused connections: %v", err)
	default:
	}
	if !rt.unreachable() {
		t.Fatal("a follower whose dials fail is not counted unreachable")
	}
	gs.up.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("snapshot after the follower came back: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("snapshot still held 10s after the follower came back")
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the follower received %d bytes of the %d-byte snapshot", len(b), len(want))
	}
	if rt.unreachable() {
		t.Fatal("a follower that took the snapshot is still counted unreachable")
	}
}
