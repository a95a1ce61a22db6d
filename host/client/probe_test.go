package client_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"

	"github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// probePlugins starts three plugins for one node: one that answers, one
// whose socket is down (a driver restarting) and one whose Probe hangs;
// restart brings the second back.
func probePlugins(t *testing.T) (plugins map[string]string, restart func()) {
	t.Helper()
	up := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	down := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	down.Stop()
	hung := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before hung stops: cleanups run last first
	for range 100 {
		hung.Script(csitest.Probe, csitest.Result{Block: release})
	}
	return map[string]string{"up": up.Endpoint(), "down": down.Endpoint(), "hung": hung.Endpoint()}, down.Restart
}

// checkProbed fails unless n has "up" answering as ext-n1, "hung" not
// answering, and "down" answering (as ext-n1) exactly when downAnswers.
func checkProbed(t *testing.T, n *structs.Node, downAnswers bool) {
	t.Helper()
	up, down, hung := n.Plugins["up"], n.Plugins["down"], n.Plugins["hung"]
	if up == nil || down == nil || hung == nil {
		t.Fatalf("registered plugins %v, want up, down and hung", n.Plugins)
	}
	if !up.Answering() || up.ExternalNodeID != "ext-n1" {
		t.Fatalf("the plugin that answers: %+v", up)
	}
	if hung.Answering() || hung.ExternalNodeID != "" || !strings.Contains(hung.ProbeError, "DeadlineExceeded") {
		t.Fatalf("the plugin whose probe hangs: %+v, want registered as not answering, its probe's deadline the error", hung)
	}
	if downAnswers != down.Answering() || (downAnswers && down.ExternalNodeID != "ext-n1") || (!downAnswers && down.ExternalNodeID != "") {
		t.Fatalf("the restarting plugin: %+v, want answering %v", down, downAnswers)
	}
}

// A plugin that does not answer when the agent says hello (its socket
// away while the driver restarts, or its probe hung) used to fail the
// hello, so the node went down with it, taking the claims of its other
// plugins along. Now the node is registered with the plugin's probe error
// beside the plugins that answer, and when it answers again the agent
// registers the node again in the same stream.
func TestAgentRegistersAPluginThatDoesNotAnswer(t *testing.T) {
	ctx := ctxT(t)
	reg := &registrar{}
	s := serveNodeconn(t, nodeconn.Config{Registrar: reg, Leader: leader(true), HeartbeatInterval: time.Second})
	plugins, restart := probePlugins(t)
	clk := clockwork.NewFakeClock()
	a, err := client.New(client.Config{Servers: []string{s.Addr()}, NodeID: "n1", RootDir: t.TempDir(), Plugins: plugins,
		Clock: clk, ProbeTimeout: 200 * time.Millisecond, ProbeInterval: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	registered := func() []*structs.Node {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return append([]*structs.Node(nil), reg.nodes...)
	}
	checkProbed(t, registered()[0], false)
	stream := s.Agent("n1")

	restart()
	// The probe rides the heartbeat: the third tick of 1 s starts it.
	for range 3 {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	testutil.WaitForCtx(t, ctx, "the node registered again", func() bool { return len(registered()) == 2 })
	checkProbed(t, registered()[1], true)
	if s.Agent("n1") != stream || a.Connected() != s.Addr() {
		t.Fatal("the agent reconnected to register its node again; a server that takes updates takes it in the stream")
	}
}

// A server of the version before updates in the stream ignores a later
// hello: the agent reconnects instead, and its hello registers the change.
func TestAgentReconnectsToUpdateAnOlderServer(t *testing.T) {
	ctx := ctxT(t)
	var beats atomic.Int64
	srv := startFakeNode(t, func(stream grpc.ServerStream) error {
		if err := stream.SendMsg(&nodeconn.ServerMsg{Welcome: &nodeconn.Welcome{HeartbeatIntervalMs: time.Second.Milliseconds(), AcksHeartbeats: true}}); err != nil {
			return err
		}
		for {
			var m nodeconn.AgentMsg
			if err := stream.RecvMsg(&m); err != nil {
				return nil
			}
			if m.Heartbeat != nil {
				beats.Add(1)
				if err := stream.SendMsg(&nodeconn.ServerMsg{HeartbeatAck: m.Heartbeat}); err != nil {
					return nil
				}
			}
		}
	})
	plugins, restart := probePlugins(t)
	clk := clockwork.NewFakeClock()
	a, err := client.New(client.Config{Servers: []string{srv.addr}, NodeID: "n1", RootDir: t.TempDir(), Plugins: plugins,
		Clock: clk, ProbeTimeout: 200 * time.Millisecond, ProbeInterval: 3 * time.Second, BackoffBase: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	checkProbed(t, srv.hello.Load().Hello.Node, false)
	restart()
	// Three heartbeats, each answered before the next (the clock runs no
	// faster than the acknowledgements: a silent leader is left too).
	for i := range int64(3) {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		testutil.WaitForCtx(t, ctx, fmt.Sprintf("heartbeat %d", i+1), func() bool { return beats.Load() > i })
	}
	testutil.WaitForCtx(t, ctx, "the agent to leave the older server to register again", func() bool { return a.Connected() == "" })
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the short wait before reconnecting
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	testutil.WaitForCtx(t, ctx, "the second hello", func() bool { return srv.hellos.Load() == 2 })
	checkProbed(t, srv.hello.Load().Hello.Node, true)
}
