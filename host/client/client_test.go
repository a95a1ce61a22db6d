package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/watcher/attach"
)

// registrar records the nodes agents register.
type registrar struct {
	mu    sync.Mutex
	nodes []*structs.Node
}

func (r *registrar) RegisterAgentNode(_ context.Context, n *structs.Node) (*structs.Node, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes = append(r.nodes, n.Copy())
	return n, nil
}

type leader bool

func (l leader) IsLeader() bool           { return bool(l) }
func (l leader) Leader() (string, string) { return "10.0.0.1:4748", "s1" }

// switchLeader is a leadership that a test takes away.
type switchLeader struct{ lost atomic.Bool }

func (l *switchLeader) IsLeader() bool           { return !l.lost.Load() }
func (l *switchLeader) Leader() (string, string) { return "10.0.0.2:4748", "s2" }

// runUntilCleanup runs a until the test ends, then waits for Run to
// return.
func runUntilCleanup(t *testing.T, a *client.Agent) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// refusingAddr is a loopback address whose port refuses connections (a
// server that is down).
func refusingAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// closingAddr is a loopback address that accepts connections and closes
// them at once.
func closingAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serveNodeconn serves a nodeconn server of cfg on a loopback port until
// the test ends.
func serveNodeconn(t *testing.T, cfg nodeconn.Config) *nodeconn.Server {
	t.Helper()
	s := nodeconn.NewServer(cfg)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	t.Cleanup(s.Stop)
	return s
}

// startServer serves nodeconn on a loopback port.
func startServer(t *testing.T, lead bool, reg *registrar) *nodeconn.Server {
	t.Helper()
	return serveNodeconn(t, nodeconn.Config{Registrar: reg, Leader: leader(lead), HeartbeatInterval: time.Second})
}

type rig struct {
	root   string
	plugin *csitest.Server
	srv    *nodeconn.Server
	reg    *registrar
	agent  *client.Agent
	clock  *clockwork.FakeClock
}

// newRig starts a plugin, the servers (the last one leads) and an agent
// connected to the leader.
func newRig(t *testing.T, leads ...bool) *rig {
	t.Helper()
	ctx := ctxT(t)
	r := &rig{root: t.TempDir(), reg: &registrar{}, clock: clockwork.NewFakeClock()}
	r.plugin = csitest.NewServer(t, csitest.Options{NodeID: "projects/p/zones/z/instances/n1", StageUnstage: true,
		OnCall: func(c csitest.Call) { r.checkDirs(t, c) }})
	var addrs []string
	for _, l := range leads {
		s := startServer(t, l, r.reg)
		addrs = append(addrs, s.Addr())
		if l {
			r.srv = s
		}
	}
	a, err := client.New(client.Config{Servers: addrs, NodeID: "n1", RootDir: r.root,
		Plugins: map[string]string{"gce-pd": r.plugin.Endpoint()}, Clock: r.clock,
		BackoffBase: time.Second, BackoffMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.agent = a
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	// The followers refuse it and it moves on without waiting: the fake
	// clock never advances before it is connected.
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatalf("agent did not connect: %v", err)
	}
	return r
}

// checkDirs is what the Kubernetes e2e mock driver checks: the staging
// path is a directory at NodeStage, the target's parent exists at
// NodePublish ("could not create target dir" otherwise).
func (r *rig) checkDirs(t *testing.T, c csitest.Call) {
	switch c.Method {
	case csitest.NodeStage:
		if fi, err := os.Stat(c.StagingPath); err != nil || !fi.IsDir() {
			t.Errorf("NodeStage: staging path %s is not a directory: %v", c.StagingPath, err)
		}
	case csitest.NodePublish:
		if fi, err := os.Stat(filepath.Dir(c.TargetPath)); err != nil || !fi.IsDir() {
			t.Errorf("NodePublish: could not create target dir: parent of %s: %v", c.TargetPath, err)
		}
	}
}

func TestAgentRegistersAndRunsNodeSteps(t *testing.T) {
	r := newRig(t, true)
	ctx := ctxT(t)
	r.reg.mu.Lock()
	got := r.reg.nodes[0]
	r.reg.mu.Unlock()
	np := got.Plugins["gce-pd"]
	if !got.Agent || got.RootDir != r.root || np == nil || np.ExternalNodeID != "projects/p/zones/z/instances/n1" || !np.StageUnstage ||
		np.Endpoint != r.plugin.Endpoint() {
		t.Fatalf("registered node = %+v, plugin %+v", got, np)
	}
	a := r.srv.Agent("n1")
	if a == nil {
		t.Fatal("the server has no connection for n1")
	}
	staging, target := csi.Paths(r.root, "gce-pd", "default", "vol1", "alloc1")
	ep := r.plugin.Endpoint()
	if err := a.NodeStageVolume(ctx, ep, &csipb.NodeStageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging,
		VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "", nil)}); err != nil {
		t.Fatalf("stage: %v", err)
	}
	if err := a.NodePublishVolume(ctx, ep, &csipb.NodePublishVolumeRequest{VolumeId: "d1", StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "", nil)}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := a.NodeUnpublishVolume(ctx, ep, &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target}); err != nil {
		t.Fatalf("unpublish: %v", err)
	}
	if err := a.NodeUnstageVolume(ctx, ep, &csipb.NodeUnstageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging}); err != nil {
		t.Fatalf("unstage: %v", err)
	}
	for _, m := range []string{csitest.NodeStage, csitest.NodePublish, csitest.NodeUnpublish, csitest.NodeUnstage} {
		if n := len(r.plugin.Calls(m)); n != 1 {
			t.Fatalf("%s calls = %d, want 1", m, n)
		}
	}
	for _, dir := range []string{staging, filepath.Dir(filepath.Dir(target))} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left after unpublish and unstage (%v)", dir, err)
		}
	}
}

// The driver's gRPC code crosses the connection unchanged; a step naming
// an endpoint the agent does not serve is refused before any call.
func TestStepErrorsKeepTheirCode(t *testing.T) {
	r := newRig(t, true)
	ctx := ctxT(t)
	a := r.srv.Agent("n1")
	_, target := csi.Paths(r.root, "gce-pd", "default", "vol1", "alloc1")
	r.plugin.Script(csitest.NodeUnpublish, csitest.Result{Code: codes.FailedPrecondition, Message: "device busy"})
	err := a.NodeUnpublishVolume(ctx, r.plugin.Endpoint(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target})
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || st.Message() != "device busy" {
		t.Fatalf("err = %v, want the driver's FailedPrecondition", err)
	}
	err = a.NodeUnpublishVolume(ctx, "tcp://10.0.0.9:1", &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("foreign endpoint: err = %v, want InvalidArgument", err)
	}
	err = a.NodeUnpublishVolume(ctx, r.plugin.Endpoint(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: "/etc/x"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("path outside root_dir: err = %v, want InvalidArgument", err)
	}
	if n := len(r.plugin.Calls(csitest.NodeUnpublish)); n != 1 {
		t.Fatalf("NodeUnpublish reached the plugin %d times, want 1", n)
	}
}

// The leader's cancellation reaches the call on the node: a step whose
// caller gives up is cancelled there, not left running.
func TestCancellationCrossesTheConnection(t *testing.T) {
	r := newRig(t, true)
	ctx := ctxT(t)
	a := r.srv.Agent("n1")
	_, target := csi.Paths(r.root, "gce-pd", "default", "vol1", "alloc1")
	never := make(chan struct{})
	r.plugin.Script(csitest.NodeUnpublish, csitest.Result{Block: never})
	callCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- a.NodeUnpublishVolume(callCtx, r.plugin.Endpoint(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target})
	}()
	if err := r.plugin.WaitFor(ctx, func() bool { return r.plugin.InFlight(csitest.NodeUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("err = %v, want Canceled", err)
	}
	if err := r.plugin.WaitFor(ctx, func() bool {
		c := r.plugin.Calls(csitest.NodeUnpublish)
		return len(c) == 1 && c[0].Done
	}); err != nil {
		t.Fatalf("the call on the node was not cancelled: %v", err)
	}
	if c := r.plugin.Calls(csitest.NodeUnpublish)[0]; c.Code != codes.Canceled {
		t.Fatalf("the node's call ended with %s, want Canceled", c.Code)
	}
}

// An agent follows the leader: a server that does not lead refuses it and
// it moves on to the next one.
func TestAgentFollowsTheLeader(t *testing.T) {
	r := newRig(t, false, true)
	if r.srv.Agent("n1") == nil {
		t.Fatal("the agent is not connected to the leader")
	}
	r.reg.mu.Lock()
	defer r.reg.mu.Unlock()
	if len(r.reg.nodes) != 1 {
		t.Fatalf("registrations = %d, want 1 (only the leader registers)", len(r.reg.nodes))
	}
}

// A round tries every server before it waits: a dead server and two
// followers ahead of the leader cost no backoff (the fake clock never
// moves), so an agent finds a new leader as soon as it is elected.
func TestAgentTriesEveryServerBeforeWaiting(t *testing.T) {
	ctx := ctxT(t)
	dead := refusingAddr(t)
	reg := &registrar{}
	leaderSrv := startServer(t, true, reg)
	servers := []string{dead, startServer(t, false, reg).Addr(), startServer(t, false, reg).Addr(), leaderSrv.Addr()}
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	a, err := client.New(client.Config{Servers: servers, NodeID: "n1", RootDir: t.TempDir(),
		Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clockwork.NewFakeClock(),
		BackoffBase: time.Minute, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatalf("the agent waited before trying every server: %v", err)
	}
	if got := a.Connected(); got != leaderSrv.Addr() {
		t.Fatalf("connected to %s, want the leader %s", got, leaderSrv.Addr())
	}
}

// askedLeader is a leadership a test grants, and that signals each time a
// server asks it (once per hello while it does not lead).
type askedLeader struct {
	leads atomic.Bool
	asked chan struct{}
}

func (l *askedLeader) IsLeader() bool {
	select {
	case l.asked <- struct{}{}:
	default:
	}
	return l.leads.Load()
}
func (l *askedLeader) Leader() (string, string) { return "", "" }

// While no server leads, the agent tries again at least once per
// heartbeat interval the last leader gave, however long the outage: the
// new leader's step-up grace is about one TTL, and an agent whose backoff
// had grown past it reached the leader after its node was marked down.
func TestReconnectWaitsNoLongerThanTheHeartbeatInterval(t *testing.T) {
	ctx := ctxT(t)
	first := &switchLeader{}
	second := &askedLeader{asked: make(chan struct{}, 1)}
	var servers []*nodeconn.Server
	for _, l := range []nodeconn.Leader{second, first} {
		s := serveNodeconn(t, nodeconn.Config{Registrar: &registrar{}, Leader: l, HeartbeatInterval: time.Second})
		servers = append(servers, s)
	}
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	clk := clockwork.NewFakeClock()
	// The follower first: the agent's first round asks it before the
	// leader welcomes the agent.
	a, err := client.New(client.Config{Servers: []string{servers[0].Addr(), servers[1].Addr()}, NodeID: "n1",
		RootDir: t.TempDir(), Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clk,
		BackoffBase: time.Second, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	first.lost.Store(true)
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the heartbeat ticker
		t.Fatal(err)
	}
	clk.Advance(time.Second) // the heartbeat the deposed leader answers by sending the agent away
	testutil.WaitForCtx(t, ctx, "the agent to leave the deposed leader", func() bool { return a.Connected() == "" })
	select {
	case <-second.asked: // the first connection's race
	default:
	}
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the short wait before reconnecting
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	// Each server is tried on its own schedule: exponential from 1 s it
	// would wait 2, 4, 8... s; capped at the heartbeat interval (1 s),
	// each second of the clock brings another try of the second server.
	for round := range 9 {
		select {
		case <-second.asked:
		case <-ctx.Done():
			t.Fatalf("round %d: the agent waited longer than the heartbeat interval before trying again", round+1)
		}
		if round == 8 {
			second.leads.Store(true)
		}
		if err := clk.BlockUntilContext(ctx, 2); err != nil { // both servers' waits
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	testutil.WaitForCtx(t, ctx, "the agent to connect to the new leader", func() bool { return a.Connected() == servers[0].Addr() })
}

// A server that steps down sends its agents away at their next heartbeat,
// so they find the new leader before their TTL runs out there (the
// deposed leader stays up as a follower: nothing breaks the stream).
func TestSteppedDownServerSendsAgentsAway(t *testing.T) {
	ctx := ctxT(t)
	lead := &switchLeader{}
	s := serveNodeconn(t, nodeconn.Config{Registrar: &registrar{}, Leader: lead, HeartbeatInterval: time.Second})
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	clk := clockwork.NewFakeClock()
	a, err := client.New(client.Config{Servers: []string{s.Addr()}, NodeID: "n1", RootDir: t.TempDir(),
		Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	lead.lost.Store(true)
	// The heartbeat ticker is the agent's only wait while connected.
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for a.Connected() != "" || s.Agent("n1") != nil {
		select {
		case <-ctx.Done():
			t.Fatal("the agent stayed connected to a server that no longer leads")
		case <-tick.C:
		}
	}
}

func TestConfigIsValidated(t *testing.T) {
	_, err := client.New(client.Config{})
	for _, want := range []string{"node_id", "servers", "root_dir", "plugin"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %s", err, want)
		}
	}
}

// A release step's idempotency key crosses the connection: the leader's
// retry of a step that succeeded is answered from the agent's journal
// without a second driver call, until the leader acknowledges the key
// (its outcome committed); the ack and the next step travel in order on
// the one stream.
func TestKeyedStepsThroughTheConnection(t *testing.T) {
	r := newRig(t, true)
	ctx := ctxT(t)
	a := r.srv.Agent("n1")
	_, target := csi.Paths(r.root, "gce-pd", "default", "vol1", "alloc1")
	key := "default/vol1/alloc1/7/node-unpublish"
	kctx := attach.WithStepKey(ctx, key)
	req := &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target}
	for range 2 {
		if err := a.NodeUnpublishVolume(kctx, r.plugin.Endpoint(), req); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.plugin.Calls(csitest.NodeUnpublish)); n != 1 {
		t.Fatalf("NodeUnpublish reached the driver %d times, want 1", n)
	}
	a.AckStep(key)
	if err := a.NodeUnpublishVolume(kctx, r.plugin.Endpoint(), req); err != nil {
		t.Fatal(err)
	}
	if n := len(r.plugin.Calls(csitest.NodeUnpublish)); n != 2 {
		t.Fatalf("after the ack, NodeUnpublish reached the driver %d times in all, want 2", n)
	}
}

// pausedLeader confirms its term, then finds its confirmation expired
// when asked again: a leader paused between the confirmation and the step.
type pausedLeader struct{}

func (pausedLeader) ConfirmLeader(context.Context, uint64) error { return nil }
func (pausedLeader) StillConfirmed(uint64) error {
	return fmt.Errorf("confirmed a lease ago: %w", structs.ErrNoLeader)
}

// The leader's fence is checked again right before a node step is sent
// down the agent's connection: after a confirmation that no longer holds,
// no step reaches the node's driver.
func TestNodeStepChecksTheFenceBeforeSending(t *testing.T) {
	r := newRig(t, true)
	ctx := ctxT(t)
	a := r.srv.Agent("n1")
	staging, _ := csi.Paths(r.root, "gce-pd", "default", "vol1", "alloc1")
	err := attach.Call(ctx, pausedLeader{}, 1, 0, func(ctx context.Context) error {
		return a.NodeStageVolume(ctx, r.plugin.Endpoint(), &csipb.NodeStageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging,
			VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "", nil)})
	})
	var ns *attach.NotSent
	if !errors.As(err, &ns) {
		t.Fatalf("stage after the confirmation expired: %v, want a not-sent error", err)
	}
	if n := len(r.plugin.Calls(csitest.NodeStage)); n != 0 {
		t.Fatalf("NodeStageVolume reached the driver %d times after the leader's confirmation expired", n)
	}
}
