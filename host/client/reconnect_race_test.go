package client_test

// The agent's connection racing its servers (client.go: Run, connect,
// try, hello, serve, heartbeat) and the server side it talks to
// (host/nodeconn), attacked a second time. Each test names the invariant
// it pins:
//
//  1. at most one server at a time; no step from a stream the agent does
//     not serve (lost race, hello timeout, silence) reaches the driver;
//  2. the new leader is reached within about one heartbeat interval of
//     its election whatever the mix of servers, with no hot loop;
//  3. Run returns promptly when cancelled and leaves no goroutine behind;
//  4. the silence detector drops no healthy session;
//  5. racing hellos leave the server one live stream for the node.
//
// The helpers (startFakeNode, startNodeconn, pump, waitReal, registrar,
// leader, ctxT ...) are the package's own, from client_test.go and
// reconnect_test.go.

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// a2Agent is an agent a test built itself (it needs the root dir and the
// plugin), with the function that stops it and says how long Run took to
// return.
type a2Agent struct {
	*client.Agent
	root   string
	plugin *csitest.Server
	stop   func() time.Duration
}

func startA2Agent(t *testing.T, cfg client.Config) *a2Agent {
	t.Helper()
	root := t.TempDir()
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	cfg.NodeID, cfg.RootDir, cfg.Plugins = "n1", root, map[string]string{"p": plugin.Endpoint()}
	a, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(runCtx) }()
	var once sync.Once
	var took time.Duration
	stop := func() time.Duration {
		once.Do(func() {
			start := time.Now()
			cancel()
			select {
			case <-done:
				took = time.Since(start)
			case <-time.After(10 * time.Second):
				took = -1
				t.Error("Run did not return within 10 s of its context's end")
			}
		})
		return took
	}
	t.Cleanup(func() { stop() })
	return &a2Agent{Agent: a, root: root, plugin: plugin, stop: stop}
}

// unpublishStep is a NodeUnpublish step on a target of vol under root.
func unpublishStep(t *testing.T, id uint64, root, endpoint, vol string) (*nodeconn.StepRequest, string) {
	t.Helper()
	_, target := csi.Paths(root, "p", "default", vol, "alloc1")
	body, err := proto.Marshal(&csipb.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target})
	if err != nil {
		t.Fatal(err)
	}
	return &nodeconn.StepRequest{ID: id, Method: nodeconn.MethodUnpublish, Endpoint: endpoint, Request: body}, target
}

// Invariant 2 (no hot loop, and the design's backoff). An agent that was
// never welcomed (started while no server leads: a whole-cluster restart,
// a new node provisioned before its servers) must back off exponentially
// up to BackoffMax: Config says BackoffMax defaults to the default
// heartbeat interval precisely because such an agent "does not know its
// leader's". Found: backoff caps the wait at max(last interval,
// BackoffBase), and with no welcome the last interval is 0, so the cap is
// BackoffBase itself: the wait never grows. With the defaults (base
// 500 ms, max 10 s) every agent of a cluster that is down hammers every
// server two to four times a second (each try a new TCP and HTTP/2
// connection and a probe of its plugins) instead of every 5-10 s. Now
// the interval caps the wait only once a leader gave one.
func TestNeverWelcomedAgentBacksOffBeyondTheBase(t *testing.T) {
	ctx := ctxT(t)
	clk := clockwork.NewFakeClock()
	var mu sync.Mutex
	var at []time.Time // fake time of each hello
	srv := startFakeNode(t, func(stream grpc.ServerStream) error {
		mu.Lock()
		at = append(at, clk.Now())
		mu.Unlock()
		return stream.SendMsg(&nodeconn.ServerMsg{NotLeader: &nodeconn.NotLeader{}})
	})
	const base, most = 100 * time.Millisecond, 10 * time.Second
	// One server, so the agent's only wait on the clock is its backoff:
	// fake time between two hellos is exactly the wait (to the pump's step).
	pump(t, clk, 50*time.Millisecond)
	startA2Agent(t, client.Config{Servers: []string{srv.addr}, Clock: clk, BackoffBase: base, BackoffMax: most})
	const hellos = 10
	testutil.WaitForCtx(t, ctx, fmt.Sprintf("%d hellos", hellos), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(at) >= hellos
	})
	mu.Lock()
	defer mu.Unlock()
	var gaps []time.Duration
	longest := time.Duration(0)
	for i := 1; i < hellos; i++ {
		g := at[i].Sub(at[i-1])
		gaps = append(gaps, g)
		longest = max(longest, g)
	}
	// After nine refusals the exponential wait is min(base<<8, max) =
	// 10 s, jittered into [5 s, 10 s]; allow far less.
	if longest < 10*base {
		t.Fatalf("BackoffBase %s, BackoffMax %s, never welcomed: the waits between hellos were %v, none longer than %s: "+
			"the backoff is capped at BackoffBase until a first welcome, so it never grows", base, most, gaps, longest)
	}
}

// Invariant 2 (whatever the mix of servers). A server that welcomes the
// agent and drops the stream at once (a hot-loop server) must
// not keep the agent from the leader. Found: every reconnect starts a new
// race in which every server is tried at once and the first welcome wins;
// the dropping server answers in a millisecond, the leader only once its
// raft commit of the registration is done (here 50 ms), so the leader's
// welcome loses every race, its stream is closed, and the agent spends
// its life reconnecting to the server that drops it: it never reaches the
// leader, and its node goes down there (TTL) with its claims held. Now a
// server whose session ended before one heartbeat interval waits out its
// backoff before the next race, while the others are tried at once.
func TestWelcomeAndDropServerDoesNotStarveTheLeader(t *testing.T) {
	welcomeAcks := &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds(), AcksHeartbeats: true}
	dropper := startFakeNode(t, func(stream grpc.ServerStream) error {
		return stream.SendMsg(&nodeconn.ServerMsg{Welcome: welcomeAcks})
	})
	reg := &slowRegistrar{delay: 50 * time.Millisecond}
	lead := &countLeader{}
	lead.leads.Store(true)
	ldr := serveNodeconn(t, nodeconn.Config{Registrar: reg, Leader: lead, HeartbeatInterval: modelInterval})
	clk := clockwork.NewFakeClock()
	pump(t, clk, 10*time.Millisecond)
	a := startA2Agent(t, client.Config{Servers: []string{dropper.addr, ldr.Addr()}, Clock: clk,
		BackoffBase: 100 * time.Millisecond, BackoffMax: time.Hour})
	budget := modelTTL + modelGrace
	if !waitReal(budget, func() bool { return a.Connected() == ldr.Addr() }) {
		t.Fatalf("after %s of real time the agent never served the leader %s: %d hellos to the server that welcomes and drops, "+
			"%d registrations on the leader, every one abandoned because the dropping server's welcome came first (connected: %q)",
			budget, ldr.Addr(), dropper.hellos.Load(), reg.calls.Load(), a.Connected())
	}
}

// slowRegistrar registers after delay (a raft commit), or fails when the
// hello's stream ends first, as host/server's does (Cluster.Apply).
type slowRegistrar struct {
	delay time.Duration
	calls atomic.Int64
	done  atomic.Int64
}

func (r *slowRegistrar) RegisterAgentNode(ctx context.Context, n *structs.Node) (*structs.Node, error) {
	r.calls.Add(1)
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	r.done.Add(1)
	return n, nil
}

// Invariant 5 and 1. The leader listed under two addresses (its IP and a
// name for it; a VIP in front of the servers next to their own
// addresses) gets two concurrent hellos from the agent. Its raft commits
// the two registrations in one batch (group commit, modelled by
// batchRegistrar), so both handlers install a stream for the node; the
// one installed last replaces the other. Found: the agent kept the
// first welcome it read, often the replaced stream's, closed the
// server's surviving stream as the race's loser, and reconnected into
// the same race, round after round. Now the server welcomes no stream it
// has replaced, and a session that ends before its first heartbeat
// interval counts against its address, which then waits while the other
// is tried: the agent settles on one session and keeps it.
func TestLeaderListedTwiceKeepsOneSession(t *testing.T) {
	for round := range 8 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ctx := ctxT(t)
			reg := &batchRegistrar{window: 20 * time.Millisecond}
			lead := &countLeader{}
			lead.leads.Store(true)
			s := serveNodeconn(t, nodeconn.Config{Registrar: reg, Leader: lead, HeartbeatInterval: modelInterval})
			_, port, _ := net.SplitHostPort(s.Addr())
			clk := clockwork.NewFakeClock()
			a := startA2Agent(t, client.Config{Servers: []string{s.Addr(), net.JoinHostPort("localhost", port)}, Clock: clk,
				BackoffBase: 100 * time.Millisecond, BackoffMax: time.Hour})
			pump(t, clk, 100*time.Millisecond)
			heartbeats := func(n int64) {
				t.Helper()
				from := lead.asked.Load()
				testutil.WaitForCtx(t, ctx, fmt.Sprintf("%d more heartbeats", n), func() bool { return lead.asked.Load() >= from+n })
			}
			testutil.WaitForCtx(t, ctx, "a session", func() bool { return a.Connected() != "" })
			heartbeats(15) // settled, whatever the first rounds did
			settled, addr := reg.done.Load(), a.Connected()
			heartbeats(15)
			if got := reg.done.Load(); got != settled || a.Connected() != addr || len(s.Connected()) != 1 {
				t.Fatalf("the agent did not keep one session with the leader listed twice: %d registrations after settling "+
					"at %d, connected %q then %q, server streams %v", got, settled, addr, a.Connected(), s.Connected())
			}
		})
	}
}

// batchRegistrar commits registrations in batches (raft's group commit):
// the first one opens a window, and every registration that arrives in it
// commits when it closes. A registration whose hello's stream ends first
// fails, as host/server's does.
type batchRegistrar struct {
	window time.Duration
	done   atomic.Int64
	mu     sync.Mutex
	commit chan struct{} // the open batch's; nil when none is open
}

func (r *batchRegistrar) RegisterAgentNode(ctx context.Context, n *structs.Node) (*structs.Node, error) {
	r.mu.Lock()
	if r.commit == nil {
		c := make(chan struct{})
		r.commit = c
		time.AfterFunc(r.window, func() {
			r.mu.Lock()
			r.commit = nil
			r.mu.Unlock()
			close(c)
		})
	}
	c := r.commit
	r.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c:
	}
	r.done.Add(1)
	return n, nil
}

// Invariant 1. Two servers both welcome (an old leader not yet aware it
// was deposed, and the new one) and each sends a step right after its
// welcome: exactly one is served, its step runs once, the other's stream
// is closed and its step never reaches the driver. Repeated to shake the
// race between the two welcomes.
func TestTwoWelcomersOnlyTheServedOnesStepRuns(t *testing.T) {
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ctx := ctxT(t)
			plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
			root := t.TempDir()
			type welcomer struct {
				f      *fakeNode
				target string
				began  atomic.Bool
				ended  atomic.Bool
				result atomic.Bool
			}
			ws := make([]*welcomer, 2)
			for k := range ws {
				w := &welcomer{}
				ws[k] = w
				step, target := unpublishStep(t, 1, root, plugin.Endpoint(), fmt.Sprintf("vol-%d", k))
				w.target = target
				w.f = startFakeNode(t, func(stream grpc.ServerStream) error {
					w.began.Store(true)
					defer w.ended.Store(true)
					var sendMu sync.Mutex
					send := func(m *nodeconn.ServerMsg) error { sendMu.Lock(); defer sendMu.Unlock(); return stream.SendMsg(m) }
					if err := send(&nodeconn.ServerMsg{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds(), AcksHeartbeats: true}}); err != nil {
						return nil
					}
					if err := send(&nodeconn.ServerMsg{Step: step}); err != nil {
						return nil
					}
					for {
						var m nodeconn.AgentMsg
						if err := stream.RecvMsg(&m); err != nil {
							return nil
						}
						switch {
						case m.Heartbeat != nil:
							_ = send(&nodeconn.ServerMsg{HeartbeatAck: m.Heartbeat})
						case m.Result != nil:
							w.result.Store(true)
						}
					}
				})
			}
			a, err := client.New(client.Config{Servers: []string{ws[0].f.addr, ws[1].f.addr}, NodeID: "n1", RootDir: root,
				Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clockwork.NewFakeClock(),
				BackoffBase: time.Second, BackoffMax: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = a.Run(runCtx) }()
			defer func() { stop(); <-done }()
			testutil.WaitForCtx(t, ctx, "the agent to serve a welcomer and answer its step", func() bool {
				c := a.Connected()
				return c != "" && ((c == ws[0].f.addr && ws[0].result.Load()) || (c == ws[1].f.addr && ws[1].result.Load()))
			})
			win, lose := ws[0], ws[1]
			if a.Connected() == ws[1].f.addr {
				win, lose = ws[1], ws[0]
			}
			// The loser's stream ends (the agent closed it), if its hello
			// reached the server before the agent cancelled it.
			testutil.WaitForCtx(t, ctx, "the losing welcomer's stream to end", func() bool { return !lose.began.Load() || lose.ended.Load() })
			calls := plugin.Calls(csitest.NodeUnpublish)
			if len(calls) != 1 || calls[0].TargetPath != win.target {
				var got []string
				for _, c := range calls {
					got = append(got, c.TargetPath)
				}
				t.Fatalf("NodeUnpublish calls on %v, want exactly one, on the served stream's target %s (the other stream's step ran: %v)",
					got, win.target, lose.result.Load())
			}
			if lose.result.Load() {
				t.Fatal("the agent answered a step on the stream it abandoned")
			}
		})
	}
}

// Invariant 4. A leader that acknowledges heartbeats but slowly (only
// every other heartbeat: two intervals without a word), while a step
// runs on the agent for the whole session (its driver call blocked), is
// healthy: the agent must neither leave it nor cancel the step.
func TestSlowAcksAndALongStepKeepTheSession(t *testing.T) {
	ctx := ctxT(t)
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	root := t.TempDir()
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	plugin.Script(csitest.NodeUnpublish, csitest.Result{Block: release})
	step, _ := unpublishStep(t, 7, root, plugin.Endpoint(), "vol-long")
	var beats atomic.Int64
	var hellos atomic.Int64
	result := make(chan *nodeconn.StepResult, 1)
	srv := startFakeNode(t, func(stream grpc.ServerStream) error {
		hellos.Add(1)
		if err := stream.SendMsg(&nodeconn.ServerMsg{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds(), AcksHeartbeats: true}}); err != nil {
			return nil
		}
		if err := stream.SendMsg(&nodeconn.ServerMsg{Step: step}); err != nil {
			return nil
		}
		for {
			var m nodeconn.AgentMsg
			if err := stream.RecvMsg(&m); err != nil {
				return nil
			}
			if m.Result != nil {
				select {
				case result <- m.Result:
				default:
				}
			}
			if m.Heartbeat != nil {
				n := beats.Add(1)
				if n%2 == 0 { // only every other heartbeat is acknowledged
					if err := stream.SendMsg(&nodeconn.ServerMsg{HeartbeatAck: m.Heartbeat}); err != nil {
						return nil
					}
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
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if err := plugin.WaitFor(ctx, func() bool { return plugin.InFlight(csitest.NodeUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(modelInterval)
		testutil.WaitForCtx(t, ctx, fmt.Sprintf("heartbeat %d", i+1), func() bool { return beats.Load() > int64(i) || a.Connected() == "" })
		if a.Connected() == "" || hellos.Load() != 1 {
			t.Fatalf("interval %d: the agent left a leader that acknowledges every other heartbeat while a step ran (connected %q, %d hellos)",
				i+1, a.Connected(), hellos.Load())
		}
	}
	if plugin.InFlight(csitest.NodeUnpublish) != 1 {
		t.Fatal("the long step was cancelled while the session held")
	}
	close(release)
	select {
	case r := <-result:
		if r.ID != 7 || r.Code != 0 {
			t.Fatalf("result %+v, want step 7 OK", r)
		}
	case <-ctx.Done():
		t.Fatal("the long step's result never came")
	}
}

// clientGoroutines lists the goroutines running the agent's code or a
// gRPC client connection's.
func clientGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "volhost/host/client.") || strings.Contains(g, "(*http2Client)") ||
			strings.Contains(g, "grpc.(*addrConn)") || strings.Contains(g, "grpc.(*ccBalancerWrapper)") {
			out = append(out, g)
		}
	}
	return out
}

// Invariant 3. Run, cancelled while it serves a leader with a step
// blocked in the driver, after a race in which a black hole, a wedged
// server and a second welcomer were tried, returns within a second and
// leaves no goroutine of its own nor of its gRPC connections behind.
func TestRunLeavesNothingBehind(t *testing.T) {
	ctx := ctxT(t)
	if g := clientGoroutines(); len(g) != 0 {
		t.Skipf("client goroutines before the test (another test's): %d", len(g))
	}
	hole, _ := blackHole(t, true)
	frozen, _ := blackHole(t, false)
	wedged := startFakeNode(t, func(stream grpc.ServerStream) error { <-stream.Context().Done(); return nil })
	welcomer := startFakeNode(t, func(stream grpc.ServerStream) error {
		if err := stream.SendMsg(&nodeconn.ServerMsg{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds()}}); err != nil {
			return nil
		}
		<-stream.Context().Done()
		return nil
	})
	reg := &registrar{}
	ldr := startServer(t, true, reg)
	never := make(chan struct{})
	defer close(never)
	clk := clockwork.NewFakeClock()
	a := startA2Agent(t, client.Config{Servers: []string{hole, frozen, wedged.addr, welcomer.addr, ldr.Addr()}, Clock: clk,
		BackoffBase: time.Second, BackoffMax: time.Hour, HelloTimeout: time.Minute})
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Connected() == ldr.Addr() {
		a.plugin.Script(csitest.NodeUnpublish, csitest.Result{Block: never})
		_, target := csi.Paths(a.root, "p", "default", "vol1", "alloc1")
		go func() {
			_ = ldr.Agent("n1").NodeUnpublishVolume(ctx, a.plugin.Endpoint(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target})
		}()
		if err := a.plugin.WaitFor(ctx, func() bool { return a.plugin.InFlight(csitest.NodeUnpublish) == 1 }); err != nil {
			t.Fatal(err)
		}
	}
	if took := a.stop(); took < 0 || took > time.Second {
		t.Fatalf("Run took %s to return after its context ended", took)
	}
	var left []string
	if !waitReal(5*time.Second, func() bool { left = clientGoroutines(); return len(left) == 0 }) {
		t.Fatalf("%d goroutines of the agent or of its gRPC connections outlived Run by 5 s:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// Invariant 3. Cancelled at any point of its life (a spread of moments
// from its start: probing, dialling a black hole, waiting on a wedged
// server's answer, in the race with a server that welcomes and drops,
// serving the leader, backing off), Run returns within a second, and once
// every run is over no goroutine of the agent or of its gRPC connections
// is left.
func TestRunReturnsPromptlyWhenCancelledAtAnyPoint(t *testing.T) {
	if g := clientGoroutines(); len(g) != 0 {
		t.Skipf("client goroutines before the test (another test's): %d", len(g))
	}
	hole, _ := blackHole(t, true)
	wedged := startFakeNode(t, func(stream grpc.ServerStream) error { <-stream.Context().Done(); return nil })
	dropper := startFakeNode(t, func(stream grpc.ServerStream) error {
		return stream.SendMsg(&nodeconn.ServerMsg{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: modelInterval.Milliseconds(), AcksHeartbeats: true}})
	})
	follower := startServer(t, false, &registrar{})
	reg := &slowRegistrar{delay: 5 * time.Millisecond}
	ldr := serveNodeconn(t, nodeconn.Config{Registrar: reg, Leader: leader(true), HeartbeatInterval: modelInterval})
	servers := []string{hole, wedged.addr, dropper.addr, follower.Addr(), ldr.Addr()}
	for i := range 16 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			clk := clockwork.NewFakeClock()
			pump(t, clk, 10*time.Millisecond)
			a := startA2Agent(t, client.Config{Servers: servers, Clock: clk, BackoffBase: 20 * time.Millisecond, BackoffMax: time.Hour})
			at := time.NewTimer(time.Duration(i) * 3 * time.Millisecond)
			defer at.Stop()
			<-at.C // the moment to cancel at, not a synchronisation
			if took := a.stop(); took < 0 || took > time.Second {
				t.Fatalf("cancelled %d ms after its start, Run took %s to return", i*3, took)
			}
		})
	}
	var left []string
	if !waitReal(5*time.Second, func() bool { left = clientGoroutines(); return len(left) == 0 }) {
		t.Fatalf("%d goroutines of the agent or of its gRPC connections outlived its runs by 5 s:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
