package nodeconn

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// gatedRecorder records every registration; one whose node carries
// Meta["gate"] blocks (entered closed) until gate is closed, as a raft
// commit that takes its time.
type gatedRecorder struct {
	entered chan struct{}
	gate    chan struct{}

	mu    sync.Mutex
	nodes []*structs.Node
}

func (r *gatedRecorder) RegisterAgentNode(_ context.Context, n *structs.Node) (*structs.Node, error) {
	if n.Meta["gate"] != "" {
		close(r.entered)
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes = append(r.nodes, n.Copy())
	return n, nil
}

func (r *gatedRecorder) all() []*structs.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*structs.Node(nil), r.nodes...)
}

// helloOf is n1's hello with plugin p answering (probeError "") or not.
func helloOf(probeError string, gated bool) *AgentMsg {
	np := &structs.NodePlugin{PluginID: "p", Endpoint: "unix:///csi.sock", ProbeError: probeError}
	if probeError == "" {
		np.ExternalNodeID = "ext-n1"
	}
	n := &structs.Node{ID: "n1", Plugins: map[string]*structs.NodePlugin{"p": np}}
	if gated {
		n.Meta = map[string]string{"gate": "yes"}
	}
	return &AgentMsg{Hello: &Hello{Node: n}}
}

// A node's registrations commit in the order of its streams: a later
// hello of a stream that a newer stream replaces while the update is on
// its way commits before the newer stream's hello, never after it, and
// the newer stream is welcomed only then. Committed after it, the store
// kept the replaced stream's report (here: its plugin not answering)
// while the connected agent, which registers again only on a change,
// never corrected it.
func TestReplacedStreamsUpdateCommitsBeforeItsReplacement(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := &gatedRecorder{entered: make(chan struct{}), gate: make(chan struct{})}
	s := NewServer(Config{Registrar: reg, Leader: alwaysLeader{}})
	log := &sendLog{}
	old, oldDone := startStream(ctx, s, log, "old", helloOf("", false))
	testutil.WaitFor(t, "the old stream's welcome", func() bool { return log.has("old:welcome") })

	// The plugin stopped answering: the old stream's update is on its way.
	old.in <- helloOf("connection refused", true)
	<-reg.entered
	// Meanwhile the agent reconnected; its hello's probe finds the plugin
	// answering again.
	newer, newDone := startStream(ctx, s, log, "new", helloOf("", false))
	testutil.WaitFor(t, "the newer hello to wait for the update", func() bool { return s.registering.Holders("n1") == 2 })

	close(reg.gate) // the update commits, then the newer hello
	testutil.WaitFor(t, "the new stream's welcome", func() bool { return log.has("new:welcome") })
	<-oldDone
	got := reg.all()
	if len(got) != 3 || !got[2].Plugins["p"].Answering() || got[1].Plugins["p"].Answering() {
		t.Fatalf("registrations %d, the last %+v: want the old stream's update, then the newer stream's hello last", len(got), got[len(got)-1].Plugins["p"])
	}
	close(newer.in)
	<-newDone
}

// A later hello of a stream already replaced is not registered: the
// stream ends Aborted and the newer stream's registration stands.
func TestReplacedStreamsLaterHelloIsNotRegistered(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := &gatedRecorder{entered: make(chan struct{}), gate: make(chan struct{})}
	s := NewServer(Config{Registrar: reg, Leader: alwaysLeader{}})
	log := &sendLog{}
	_, oldDone := startStream(ctx, s, log, "old", helloOf("", false))
	testutil.WaitFor(t, "the old stream's welcome", func() bool { return log.has("old:welcome") })
	oldAgent := s.Agent("n1")

	newer, newDone := startStream(ctx, s, log, "new", helloOf("", false))
	testutil.WaitFor(t, "the new stream's welcome", func() bool { return log.has("new:welcome") })

	// The replaced stream's handler ends on the replacement; its later
	// hello, read before that, goes through reregister as a racing read
	// would.
	<-oldDone
	err := s.reregister(ctx, "", oldAgent, helloOf("connection refused", false).Hello.Node)
	if status.Code(err) != codes.Aborted {
		t.Fatalf("a replaced stream's later hello: %v, want Aborted", err)
	}
	if got := reg.all(); len(got) != 2 || !got[1].Plugins["p"].Answering() {
		t.Fatalf("%d registrations, the last %+v: the replaced stream's update was registered", len(got), got[len(got)-1].Plugins["p"])
	}
	close(newer.in)
	<-newDone
}

// startStream serves a stream named name for s whose agent sends first
// first, and returns it with the channel its handler's end is sent on.
func startStream(ctx context.Context, s *Server, log *sendLog, name string, first *AgentMsg) (*chanStream, chan error) {
	st := &chanStream{name: name, ctx: ctx, in: make(chan *AgentMsg, 4), log: log}
	st.in <- first
	done := make(chan error, 1)
	go func() { done <- s.connect(st) }()
	return st, done
}

// A later hello in the stream registers the node again, as the agent now
// reports it; one naming another node ends the stream and registers
// nothing: the stream's token was authorized for the node of its first
// hello, and a later hello is no way around that.
func TestLaterHelloRegistersOnlyTheStreamsNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := &gatedRecorder{}
	s := NewServer(Config{Registrar: reg, Leader: alwaysLeader{}})
	node := func(id, probeError string) *AgentMsg {
		return &AgentMsg{Hello: &Hello{Node: &structs.Node{ID: id, Plugins: map[string]*structs.NodePlugin{
			"p": {PluginID: "p", Endpoint: "unix:///csi.sock", ProbeError: probeError}}}}}
	}
	stream, done := startStream(ctx, s, &sendLog{}, "a", node("n1", "connection refused"))
	testutil.WaitFor(t, "the welcome", func() bool { return stream.log.has("a:welcome") })

	stream.in <- node("n1", "")
	testutil.WaitFor(t, "the node registered again", func() bool { return len(reg.all()) == 2 })
	if got := reg.all()[1].Plugins["p"]; got.ProbeError != "" {
		t.Fatalf("the second registration: %+v, want the plugin answering", got)
	}

	stream.in <- node("n2", "")
	if err := <-done; status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a later hello naming another node: %v, want InvalidArgument", err)
	}
	if n := len(reg.all()); n != 2 {
		t.Fatalf("%d registrations, want the two of n1: another node was registered on n1's stream", n)
	}
}

// While a later hello's registration is on its way (a raft commit taking
// its time), the stream's heartbeats are still acknowledged: the
// registration runs beside the stream's loop (updater). In the loop, the
// agent took the silence for a wedged leader and the tracker saw no beat,
// so a slow update of one plugin's probe could take the node down.
func TestHeartbeatsAckedWhileALaterHelloRegisters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := &gatedRecorder{entered: make(chan struct{}), gate: make(chan struct{})}
	s := NewServer(Config{Registrar: reg, Leader: alwaysLeader{}})
	log := &sendLog{}
	st, done := startStream(ctx, s, log, "a", helloOf("", false))
	testutil.WaitFor(t, "the welcome", func() bool { return log.has("a:welcome") })

	st.in <- helloOf("connection refused", true)
	<-reg.entered
	st.in <- &AgentMsg{Heartbeat: &Heartbeat{Seq: 1}}
	t.Cleanup(func() { close(reg.gate); close(st.in); <-done })
	testutil.WaitFor(t, "the heartbeat's ack while the later hello registers", func() bool { return log.has("a:other") })
}
