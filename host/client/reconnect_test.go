package client_test

// The agent's reconnect (client.go: Run, connect, try, hello, serve),
// attacked by role: each test names the invariant it pins, and most were
// written against the agent that tried its servers one after the other,
// where they found a way it stayed away from the new leader past
// heartbeat_ttl + heartbeat_grace, so its node was marked down and its
// released claims held (host/nodeconn/tracker.go). The model cluster:
// heartbeat interval 1 s, TTL 5 s, grace 5 s, so an agent must find the
// new leader within 10 s of its election.
//
// Time: the agent's waits run on a fake clock that pump advances while
// the agent waits on it. What a fake clock cannot make fast (dials and
// handshakes, which run in real time) is measured in real time against
// the model budget.

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/internal/testutil"
)

// The model cluster's heartbeat settings (the commit's own example).
const (
	modelInterval = time.Second
	modelTTL      = 5 * time.Second
	modelGrace    = 5 * time.Second
)

// countLeader is a leadership a test grants, counting the hellos it was
// asked about.
type countLeader struct {
	leads atomic.Bool
	asked atomic.Int64
}

func (l *countLeader) IsLeader() bool           { l.asked.Add(1); return l.leads.Load() }
func (l *countLeader) Leader() (string, string) { return "", "" }

func startNodeconn(t *testing.T, l nodeconn.Leader) *nodeconn.Server {
	t.Helper()
	return serveNodeconn(t, nodeconn.Config{Registrar: &registrar{}, Leader: l, HeartbeatInterval: modelInterval})
}

// fakeNode is a server speaking the nodeconn protocol as handle says,
// after it read the agent's first message (counted in hellos; the last
// one kept in hello).
type fakeNode struct {
	addr   string
	hellos atomic.Int64
	hello  atomic.Pointer[nodeconn.AgentMsg]
}

func startFakeNode(t *testing.T, handle func(stream grpc.ServerStream) error) *fakeNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{addr: lis.Addr().String()}
	gs := grpc.NewServer()
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "volhost.nodeconn.v1.NodeConn",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Connect", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				var m nodeconn.AgentMsg
				if err := stream.RecvMsg(&m); err != nil {
					return err
				}
				f.hello.Store(&m)
				f.hellos.Add(1)
				return handle(stream)
			}}},
	}, struct{}{})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return f
}

// blackHole is an address that takes TCP connections and never says a
// word: with accept false the kernel completes the handshake and the
// listener never accepts (a frozen process); with accept true the
// connection is accepted and read, never answered (no HTTP/2).
func blackHole(t *testing.T, accept bool) (addr string, accepted *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	if accept {
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				accepted.Add(1)
				go func() { _, _ = io.Copy(io.Discard, c) }()
			}
		}()
	}
	return lis.Addr().String(), accepted
}

// freezeProxy forwards TCP to target until freeze; then it forwards
// nothing more either way and closes nothing, as a host that lost power
// or a partition does: no RST, no FIN, every packet dropped.
type freezeProxy struct {
	addr   string
	frozen chan struct{}
	once   sync.Once
}

func startFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{addr: lis.Addr().String(), frozen: make(chan struct{})}
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case <-p.frozen:
					return // dropped; the conns stay open until cleanup
				default:
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			track(c)
			select {
			case <-p.frozen:
				continue // accepted by the kernel, never answered
			default:
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			track(up)
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	return p
}

func (p *freezeProxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

// pump stands for time passing: while the agent waits on the fake clock
// it advances it by step (a real tick between advances keeps a connected
// agent's heartbeat ticker from spinning). It stops with the test.
func pump(t *testing.T, clk *clockwork.FakeClock, step time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if err := clk.BlockUntilContext(ctx, 1); err != nil {
				return
			}
			clk.Advance(step)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// runAgent starts an agent on servers and the fake clock; the test's
// cleanup stops it and fails the test if Run does not return.
func runAgent(t *testing.T, servers []string, clk clockwork.Clock, base time.Duration) *client.Agent {
	t.Helper()
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	a, err := client.New(client.Config{Servers: servers, NodeID: "n1", RootDir: t.TempDir(),
		Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clk, BackoffBase: base, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10 s of its context's end")
		}
	})
	return a
}

// waitReal polls cond for at most budget of real time; false if it never
// held.
func waitReal(budget time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// Invariant 1 and 4: after a failover, servers that take TCP and never
// answer (a frozen process, a host whose kernel answers but whose server
// does not) must not keep the agent from the new leader past TTL + grace.
// Found: a round tried the servers one after the other, and each black
// hole cost the whole connect timeout (5 s, real time) before the next was
// tried: with the leader killed and five such servers ahead of the new
// leader in Config.Servers, the agent reached it about 25 s after its
// election, its node long marked down (10 s). The servers are now tried
// at once, each on its own schedule.
func TestSilentServersAheadOfTheNewLeaderDoNotDelayIt(t *testing.T) {
	ctx := ctxT(t)
	old := &switchLeader{}
	oldSrv := startNodeconn(t, old)
	next := &countLeader{}
	nextSrv := startNodeconn(t, next)
	servers := []string{oldSrv.Addr()}
	for i := range 5 {
		addr, _ := blackHole(t, i%2 == 0)
		servers = append(servers, addr)
	}
	servers = append(servers, nextSrv.Addr())
	clk := clockwork.NewFakeClock()
	a := runAgent(t, servers, clk, time.Second)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	pump(t, clk, 50*time.Millisecond)
	// The leader dies (its port refuses) and the last server is elected.
	oldSrv.Stop()
	old.lost.Store(true)
	next.leads.Store(true)
	elected := time.Now()
	budget := modelTTL + modelGrace
	if !waitReal(budget, func() bool { return a.Connected() == nextSrv.Addr() }) {
		t.Fatalf("the agent had not reached the new leader %s after %s of real time (TTL %s + grace %s): "+
			"five silent servers ahead of it cost a full connect timeout each, one after the other (connected: %q)",
			time.Since(elected).Round(time.Millisecond), budget, modelTTL, modelGrace, a.Connected())
	}
}

// Invariant 1: a leader whose host dies, or is cut off, without closing
// the agent's TCP connection (power loss, partition: no RST, no FIN) must
// not keep the agent. Found: the agent only sent on its stream
// (heartbeats) and waited for the leader's messages; the leader sent
// nothing unless it had a step, and a heartbeat the dead peer never
// acknowledges sits in the kernel's send buffer: nothing failed, and the
// agent stayed "connected" to the dead leader for as long as TCP's
// retransmission timeout (about 15 min on Linux) while a new leader marked
// its node down. The leader now acknowledges every heartbeat, and the
// agent leaves one that sent nothing for three intervals.
func TestAgentLeavesALeaderThatFellSilent(t *testing.T) {
	ctx := ctxT(t)
	old := &switchLeader{}
	oldSrv := startNodeconn(t, old)
	proxy := startFreezeProxy(t, oldSrv.Addr())
	next := &countLeader{}
	nextSrv := startNodeconn(t, next)
	clk := clockwork.NewFakeClock()
	a := runAgent(t, []string{proxy.addr, nextSrv.Addr()}, clk, time.Second)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.Connected(); got != proxy.addr {
		t.Fatalf("connected to %s, want the first leader (through %s)", got, proxy.addr)
	}
	// The leader's host goes silent; the other server is elected.
	proxy.freeze()
	old.lost.Store(true)
	next.leads.Store(true)
	start := clk.Now()
	limit := 30 * modelInterval
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for a.Connected() != nextSrv.Addr() {
		if clk.Since(start) < limit {
			// Its heartbeat ticker, or its backoff: the agent's only waits.
			wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			if clk.BlockUntilContext(wctx, 1) == nil {
				clk.Advance(100 * time.Millisecond)
			}
			cancel()
		}
		select {
		case <-deadline.C:
			t.Fatalf("after %s of fake time (%d heartbeat intervals; TTL %s + grace %s) and 15 s of real time the agent "+
				"is still connected to %q, the silent dead leader; the new leader %s was asked %d times",
				clk.Since(start), clk.Since(start)/modelInterval, modelTTL, modelGrace, a.Connected(), nextSrv.Addr(), next.asked.Load())
		case <-tick.C:
		}
	}
	if d := clk.Since(start); d > modelTTL+modelGrace {
		t.Fatalf("the agent reached the new leader %s after the dead one went silent, past TTL + grace", d)
	}
}

// Invariant 4 (and 1): a server that speaks HTTP/2 but never answers the
// hello (a wedged server process: its gRPC transport still answers, its
// handler is stuck, say on a registration that never commits) must not
// keep the agent from the leader listed after it. Found: the agent waited
// for the first answer with no deadline, one server after the other, so
// the leader after the wedged server was never tried.
func TestWedgedServerDoesNotKeepTheAgentFromTheLeader(t *testing.T) {
	hung := startFakeNode(t, func(stream grpc.ServerStream) error {
		<-stream.Context().Done()
		return nil
	})
	ldr := startNodeconn(t, leader(true))
	clk := clockwork.NewFakeClock()
	pump(t, clk, 100*time.Millisecond)
	a := runAgent(t, []string{hung.addr, ldr.Addr()}, clk, time.Second)
	budget := modelTTL + modelGrace
	if !waitReal(budget, func() bool { return a.Connected() == ldr.Addr() }) {
		t.Fatalf("after %s the agent still waits on a server that never answers its hello; "+
			"the leader after it in Config.Servers was never reached (connected: %q)", budget, a.Connected())
	}
}

// Invariant 4: a hello that is never answered is given up after
// HelloTimeout and tried again, so a server wedged at the agent's hello
// that leads once it recovers (its only server here) is reached: waited
// on forever, the first hello would keep the agent from it.
func TestUnansweredHelloIsTriedAgain(t *testing.T) {
	ctx := ctxT(t)
	var calls atomic.Int64
	srv := startFakeNode(t, func(stream grpc.ServerStream) error {
		if calls.Add(1) == 1 {
			<-stream.Context().Done() // wedged on the first hello
			return nil
		}
		if err := stream.SendMsg(&nodeconn.ServerMsg{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds()}}); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	})
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	clk := clockwork.NewFakeClock()
	pump(t, clk, 100*time.Millisecond)
	a, err := client.New(client.Config{Servers: []string{srv.addr}, NodeID: "n1", RootDir: t.TempDir(),
		Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clk, HelloTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	testutil.WaitForCtx(t, ctx, "the agent to connect once its hello is answered", func() bool { return a.Connected() == srv.addr })
	if n := srv.hellos.Load(); n != 2 {
		t.Fatalf("%d hellos, want 2 (the unanswered one, then the welcomed one)", n)
	}
}

// Invariant 3: a server that says it does not lead must not keep the
// agent, nor have it run a step. Found: the session loop ignored a
// NotLeader that arrived after the welcome and relied on the server
// closing the stream after it, so a server (or a version of it) that sent
// NotLeader and then a step had the agent run it.
func TestNotLeaderAfterTheWelcomeEndsTheSession(t *testing.T) {
	ctx := ctxT(t)
	root := t.TempDir()
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	_, target := csi.Paths(root, "p", "default", "vol1", "alloc1")
	body, err := proto.Marshal(&csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan *nodeconn.StepResult, 1)
	left := make(chan struct{})
	var leftOnce sync.Once
	leave := func() { leftOnce.Do(func() { close(left) }) }
	srv := startFakeNode(t, func(stream grpc.ServerStream) error {
		for _, m := range []*nodeconn.ServerMsg{
			{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds()}},
			{NotLeader: &nodeconn.NotLeader{Leader: "10.0.0.9:4748"}},
			{Step: &nodeconn.StepRequest{ID: 1, Method: nodeconn.MethodUnpublish, Endpoint: plugin.Endpoint(), Request: body}},
		} {
			if err := stream.SendMsg(m); err != nil {
				leave()
				return nil
			}
		}
		for {
			var m nodeconn.AgentMsg
			if err := stream.RecvMsg(&m); err != nil {
				leave()
				return nil
			}
			if m.Result != nil {
				select {
				case results <- m.Result:
				default:
				}
			}
		}
	})
	clk := clockwork.NewFakeClock()
	a, err := client.New(client.Config{Servers: []string{srv.addr}, NodeID: "n1", RootDir: root,
		Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clk, BackoffBase: time.Second, BackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	select {
	case <-left:
		// It left on the NotLeader.
	case r := <-results:
		t.Fatalf("the agent ran a step (result %+v, %d NodeUnpublish calls on the driver) sent after the server said "+
			"it does not lead, and is still connected to it (%q)", r, len(plugin.Calls(csitest.NodeUnpublish)), a.Connected())
	case <-ctx.Done():
		t.Fatalf("neither left nor answered: connected %q", a.Connected())
	}
}

// Invariant 2. With no leader anywhere, and servers
// that welcome and drop the stream at once, welcome and then revoke the
// token, answer the hello with an error, refuse as followers, refuse the
// TCP connection or close it right after accepting it, the agent never
// tries again without waiting on its clock: between two advances of the
// fake clock it makes at most one attempt per server (the clock stands
// still, so a loop without a wait would make thousands).
func TestNoHotLoopWithoutALeader(t *testing.T) {
	ctx := ctxT(t)
	welcome := func(stream grpc.ServerStream) error {
		return stream.SendMsg(&nodeconn.ServerMsg{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds()}})
	}
	fakes := []*fakeNode{
		startFakeNode(t, welcome), // welcomes, then the stream ends
		startFakeNode(t, func(stream grpc.ServerStream) error { // welcomes, then its token is revoked
			if err := welcome(stream); err != nil {
				return err
			}
			return status.Error(codes.PermissionDenied, "token revoked")
		}),
		startFakeNode(t, func(grpc.ServerStream) error { return status.Error(codes.Internal, "boom") }),
		startFakeNode(t, func(stream grpc.ServerStream) error {
			return stream.SendMsg(&nodeconn.ServerMsg{NotLeader: &nodeconn.NotLeader{}})
		}),
	}
	servers := []string{}
	for _, f := range fakes {
		servers = append(servers, f.addr)
	}
	servers = append(servers, refusingAddr(t), closingAddr(t))
	attempts := func() int64 {
		var n int64
		for _, f := range fakes {
			n += f.hellos.Load()
		}
		return n
	}
	clk := clockwork.NewFakeClock()
	runAgent(t, servers, clk, 100*time.Millisecond)
	// Advance until the fakes saw enough hellos that the agent plainly
	// keeps trying. Fake time runs ahead of the dials and handshakes,
	// which take real time, so the advances are more than the hellos;
	// what must hold is the bound per advance.
	const want = 20
	advances := 0
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for attempts() < want {
		select {
		case <-ctx.Done():
			t.Fatalf("only %d hellos in %d advances: the agent stopped trying", attempts(), advances)
		case <-tick.C:
		}
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("advance %d: the agent stopped waiting on its clock (%d hellos so far): %v", advances, attempts(), err)
		}
		// At most one attempt per fake server per advance, plus the first round.
		if n, limit := attempts(), int64((advances+1)*len(fakes)); n > limit {
			t.Fatalf("advance %d: %d hellos while the clock stood still, want at most %d: a loop without a wait", advances, n, limit)
		}
		clk.Advance(modelInterval)
		advances++
	}
	n, limit := attempts(), int64((advances+1)*len(fakes))
	t.Logf("%d hellos in %d advances of %s (at most %d allowed)", n, advances, modelInterval, limit)
}

// Invariant 1. However long the outage and wherever
// the new leader sits in Config.Servers among dead, refusing and follower
// servers (seven in all), the agent reaches it within one heartbeat
// interval of fake time after its election: the backoff grew for eight
// rounds without a leader and is capped at the last welcome's interval.
func TestFailoverAfterALongOutageFromEveryPosition(t *testing.T) {
	for pos := range 6 {
		t.Run("", func(t *testing.T) {
			ctx := ctxT(t)
			old := &switchLeader{}
			oldSrv := startNodeconn(t, old)
			next := &countLeader{}
			nextSrv := startNodeconn(t, next)
			dead := refusingAddr(t)
			closer := closingAddr(t)
			others := []string{dead, closer,
				startNodeconn(t, leader(false)).Addr(), startNodeconn(t, leader(false)).Addr(), startNodeconn(t, leader(false)).Addr()}
			rest := append(others[:pos:pos], nextSrv.Addr())
			rest = append(rest, others[pos:]...)
			servers := append([]string{oldSrv.Addr()}, rest...)
			clk := clockwork.NewFakeClock()
			a := runAgent(t, servers, clk, 100*time.Millisecond)
			if err := a.WaitConnected(ctx); err != nil {
				t.Fatal(err)
			}
			pump(t, clk, 10*time.Millisecond)
			oldSrv.Stop()
			old.lost.Store(true)
			// Eight rounds without a leader.
			testutil.WaitForCtx(t, ctx, "eight rounds without a leader", func() bool { return next.asked.Load() >= 8 })
			next.leads.Store(true)
			elected := clk.Now()
			testutil.WaitForCtx(t, ctx, "the agent to reach the new leader", func() bool { return a.Connected() == nextSrv.Addr() })
			d := clk.Since(elected)
			t.Logf("new leader at position %d: reached %s of fake time after its election", pos+1, d)
			// Fake time runs on while other servers wait, so the new
			// leader's hello, in real time, counts in it: a retry within
			// the interval plus that.
			if d > modelInterval+500*time.Millisecond {
				t.Fatalf("new leader at position %d of %d: reached %s of fake time after its election, want within the heartbeat interval %s",
					pos+1, len(servers), d, modelInterval)
			}
		})
	}
}

// Invariant 3. Run returns promptly when its context
// ends mid-round: in the middle of a connection attempt to a server that
// never answers the handshake, and while it waits for a hello's answer
// that never comes.
func TestRunReturnsPromptlyWhenCancelledMidAttempt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (addr string, reached func() bool)
	}{
		{"mid-dial to a black hole", func(t *testing.T) (string, func() bool) {
			addr, accepted := blackHole(t, true)
			return addr, func() bool { return accepted.Load() > 0 }
		}},
		{"hello never answered", func(t *testing.T) (string, func() bool) {
			f := startFakeNode(t, func(stream grpc.ServerStream) error { <-stream.Context().Done(); return nil })
			return f.addr, func() bool { return f.hellos.Load() > 0 }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			addr, reached := tc.start(t)
			plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
			a, err := client.New(client.Config{Servers: []string{addr}, NodeID: "n1", RootDir: t.TempDir(),
				Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clockwork.NewFakeClock()})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- a.Run(runCtx) }()
			testutil.WaitForCtx(t, ctx, "the agent to reach the server", reached)
			stop()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				t.Fatal("Run did not return within 2 s of its context's end")
			}
		})
	}
}

// A server of the version before heartbeat acknowledgements welcomes the
// agent without AcksHeartbeats and never answers a heartbeat: the agent
// must not take that silence for a dead leader, or every agent upgraded
// before its servers would leave its leader every three intervals.
func TestSilenceIsNotHeldAgainstAnOlderServer(t *testing.T) {
	ctx := ctxT(t)
	var hellos, beats atomic.Int64
	srv := startFakeNode(t, func(stream grpc.ServerStream) error {
		hellos.Add(1)
		if err := stream.SendMsg(&nodeconn.ServerMsg{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds()}}); err != nil {
			return err
		}
		for { // reads the heartbeats, answers none
			var m nodeconn.AgentMsg
			if err := stream.RecvMsg(&m); err != nil {
				return nil
			}
			if m.Heartbeat != nil {
				beats.Add(1)
			}
		}
	})
	clk := clockwork.NewFakeClock()
	a := runAgent(t, []string{srv.addr}, clk, time.Second)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // ten heartbeat intervals, each heartbeat received
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(modelInterval)
		testutil.WaitForCtx(t, ctx, fmt.Sprintf("heartbeat %d", i+1), func() bool { return beats.Load() > int64(i) })
	}
	if a.Connected() != srv.addr || hellos.Load() != 1 {
		t.Fatalf("the agent left an older server that does not acknowledge heartbeats: connected %q, %d hellos", a.Connected(), hellos.Load())
	}
}

// A leader that acknowledges heartbeats keeps its agent however long the
// session: its acknowledgements are what the agent holds it to.
func TestAgentStaysWithALeaderThatAcknowledges(t *testing.T) {
	ctx := ctxT(t)
	reg := &registrar{}
	lead := &countLeader{}
	lead.leads.Store(true)
	s := serveNodeconn(t, nodeconn.Config{Registrar: reg, Leader: lead, HeartbeatInterval: modelInterval})
	clk := clockwork.NewFakeClock()
	a := runAgent(t, []string{s.Addr()}, clk, time.Second)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	// The server asks its leadership once at the hello and once per
	// heartbeat.
	for i := range 10 { // ten heartbeat intervals, each heartbeat received
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(modelInterval)
		testutil.WaitForCtx(t, ctx, fmt.Sprintf("heartbeat %d", i+1), func() bool { return lead.asked.Load() > int64(i+1) })
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if a.Connected() != s.Addr() || len(reg.nodes) != 1 {
		t.Fatalf("the agent left a leader that acknowledges its heartbeats: connected %q, %d registrations", a.Connected(), len(reg.nodes))
	}
}
