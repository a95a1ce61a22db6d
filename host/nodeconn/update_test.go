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

// syncRecorder keeps every registration (safe for concurrent use).
type syncRecorder struct {
	mu    sync.Mutex
	nodes []*structs.Node
}

func (r *syncRecorder) RegisterAgentNode(_ context.Context, n *structs.Node) (*structs.Node, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes = append(r.nodes, n.Copy())
	return n, nil
}

func (r *syncRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.nodes)
}

// A later hello in the stream registers the node again, as the agent now
// reports it; one naming another node ends the stream and registers
// nothing: the stream's token was authorized for the node of its first
// hello, and a later hello is no way around that.
func TestLaterHelloRegistersOnlyTheStreamsNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := &syncRecorder{}
	s := NewServer(Config{Registrar: reg, Leader: alwaysLeader{}})
	stream := &chanStream{name: "a", ctx: ctx, in: make(chan *AgentMsg, 4), log: &sendLog{}}
	node := func(id, probeError string) *AgentMsg {
		return &AgentMsg{Hello: &Hello{Node: &structs.Node{ID: id, Plugins: map[string]*structs.NodePlugin{
			"p": {PluginID: "p", Endpoint: "unix:///csi.sock", ProbeError: probeError}}}}}
	}
	stream.in <- node("n1", "connection refused")
	done := make(chan error, 1)
	go func() { done <- s.connect(stream) }()
	testutil.WaitFor(t, "the welcome", func() bool { return stream.log.has("a:welcome") })

	stream.in <- node("n1", "")
	testutil.WaitFor(t, "the node registered again", func() bool { return reg.count() == 2 })
	if reg.nodes[1].Plugins["p"].ProbeError != "" {
		t.Fatalf("the second registration: %+v, want the plugin answering", reg.nodes[1].Plugins["p"])
	}

	stream.in <- node("n2", "")
	if err := <-done; status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a later hello naming another node: %v, want InvalidArgument", err)
	}
	if reg.count() != 2 {
		t.Fatalf("%d registrations, want the two of n1: another node was registered on n1's stream", reg.count())
	}
}
