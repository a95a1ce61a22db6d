package csi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// expiringLeader confirms its term and keeps confirming it (StillConfirmed)
// until the test says the confirmation expired: the moment a leader paused
// past its lease, or deposed, would find its confirmation gone. checked is
// closed at the first StillConfirmed, i.e. once the client has looked at
// the fence for the call.
type expiringLeader struct {
	expired atomic.Bool
	once    sync.Once
	checked chan struct{}
}

func newExpiringLeader() *expiringLeader { return &expiringLeader{checked: make(chan struct{})} }

func (l *expiringLeader) ConfirmLeader(context.Context, uint64) error {
	if l.expired.Load() {
		return fmt.Errorf("deposed: %w", structs.ErrNoLeader)
	}
	return nil
}

func (l *expiringLeader) StillConfirmed(uint64) error {
	l.once.Do(func() { close(l.checked) })
	if l.expired.Load() {
		return fmt.Errorf("confirmed a lease ago: %w", structs.ErrNoLeader)
	}
	return nil
}

// gatedProxy is a unix socket in front of target whose connections carry
// nothing until open: the connection's set-up (the HTTP/2 handshake gRPC
// waits for before it writes a request) takes as long as the test says, as
// a driver slow to accept, a loaded host or a SIGSTOP during the dial
// would make it.
type gatedProxy struct {
	endpoint string
	gate     chan struct{}
	once     sync.Once
	accepted chan struct{} // closed at the first connection
	acceptMu sync.Once
}

func startGatedProxy(t *testing.T, target string) *gatedProxy {
	t.Helper()
	dir, err := os.MkdirTemp("", "fp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "p.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &gatedProxy{endpoint: "unix://" + sock, gate: make(chan struct{}), accepted: make(chan struct{})}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		close(done)
		p.open()
		_ = lis.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			p.acceptMu.Do(func() { close(p.accepted) })
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				<-p.gate
				select {
				case <-done:
					return
				default:
				}
				b, err := net.Dial("unix", strings.TrimPrefix(target, "unix://"))
				if err != nil {
					return
				}
				defer b.Close()
				go func() {
					<-done
					_ = c.Close()
					_ = b.Close()
				}()
				go func() { _, _ = io.Copy(b, c); _ = b.Close() }()
				_, _ = io.Copy(c, b)
			}()
		}
	}()
	return p
}

func (p *gatedProxy) open() { p.once.Do(func() { close(p.gate) }) }

// Invariant 1 (safety). The client checks the fence in invoke before the
// call is handed to gRPC, but the client dials lazily (grpc.NewClient): the
// connection's set-up, which RATIONALE.md names as part of the window the
// fence was added to close, happens inside the gRPC call, after the fence.
// Found: a call whose fence passed, then whose leader's confirmation
// expired while the connection was being set up, reaches the driver:
// ControllerUnpublishVolume from a leader that is no longer confirmed.
// The same holds for the first call after a driver restart (acquire
// retires the broken connection and the next call dials again).
// Now invoke waits for the connection to be up (or failed) before it
// looks at the fence.
func TestFenceHoldsAcrossTheConnectionSetUp(t *testing.T) {
	srv := csitest.NewServer(t, csitest.Options{PublishUnpublish: true})
	proxy := startGatedProxy(t, srv.Endpoint())
	c := newClient(t, csi.Config{})
	ctx := waitCtx(t)
	l := newExpiringLeader()
	done := make(chan error, 1)
	go func() {
		done <- attach.Call(ctx, l, 1, 0, func(ctx context.Context) error {
			return c.ControllerUnpublishVolume(ctx, proxy.endpoint, &csipb.ControllerUnpublishVolumeRequest{VolumeId: "vol1", NodeId: "ext-node1"})
		})
	}()
	// The call is setting up its connection (the client dials only
	// inside the call, after invoke's fence). Now the leader's
	// confirmation is gone (a pause past the lease, a step-down).
	select {
	case <-proxy.accepted:
	case <-ctx.Done():
		t.Fatal("the call never dialled")
	}
	l.expired.Store(true)
	proxy.open()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the call never returned")
	}
	if n := len(srv.Calls(csitest.ControllerUnpublish)); n != 0 {
		t.Errorf("ControllerUnpublishVolume reached the driver %d time(s) although the leader's confirmation expired before the "+
			"connection carrying it was set up (call returned %v): the fence is checked before the dial, not before the send", n, err)
	}
	var ns *attach.NotSent
	if !errors.As(err, &ns) {
		t.Errorf("call returned %v, want a *attach.NotSent", err)
	}
}
