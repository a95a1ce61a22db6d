package nodeconn

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// chanStream is a Connect stream driven by the test: in feeds what the
// agent sends, every message the server sends is logged (with the
// stream's name, in one order shared by the streams), and a Step send
// blocks while holdSteps is open.
type chanStream struct {
	name      string
	ctx       context.Context
	in        chan *AgentMsg
	log       *sendLog
	holdSteps chan struct{} // nil: steps go out at once
	inSend    chan struct{} // closed when a step send is blocked
	once      sync.Once
}

type sendLog struct {
	mu   sync.Mutex
	sent []string // "name:kind"
}

func (l *sendLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, s)
}

func (l *sendLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.sent...)
}

func (l *sendLog) has(s string) bool {
	for _, x := range l.all() {
		if x == s {
			return true
		}
	}
	return false
}

func (s *chanStream) SetHeader(metadata.MD) error  { return nil }
func (s *chanStream) SendHeader(metadata.MD) error { return nil }
func (s *chanStream) SetTrailer(metadata.MD)       {}
func (s *chanStream) Context() context.Context     { return s.ctx }
func (s *chanStream) SendMsg(m any) error {
	msg := m.(*ServerMsg)
	kind := "other"
	switch {
	case msg.Welcome != nil:
		kind = "welcome"
	case msg.Step != nil:
		kind = "step"
		if s.holdSteps != nil {
			s.once.Do(func() { close(s.inSend) })
			<-s.holdSteps
		}
	}
	s.log.add(s.name + ":" + kind)
	return nil
}

func (s *chanStream) RecvMsg(m any) error {
	select {
	case msg, ok := <-s.in:
		if !ok {
			return io.EOF
		}
		*(m.(*AgentMsg)) = *msg
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// A second stream for the same node (the agent reconnected) replaces
// the first: the old stream ends with codes.Aborted saying why, a step
// being sent on it when the new one arrives is sent before the new one
// is welcomed, and none is sent on it afterwards.
func TestReplacedStreamEndsAborted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &sendLog{}
	s := NewServer(Config{Registrar: &syncRegistrar{}, Leader: alwaysLeader{}})
	hello := &AgentMsg{Hello: &Hello{Node: &structs.Node{ID: "n1"}}}

	old := &chanStream{name: "old", ctx: ctx, in: make(chan *AgentMsg, 4), log: log,
		holdSteps: make(chan struct{}), inSend: make(chan struct{})}
	old.in <- hello
	oldDone := make(chan error, 1)
	go func() { oldDone <- s.connect(old) }()
	testutil.WaitFor(t, "the first stream to be welcomed", func() bool { return log.has("old:welcome") })
	oldAgent := s.Agent("n1")

	// A step is being sent on the old stream, blocked in its send.
	stepDone := make(chan error, 1)
	go func() {
		stepDone <- oldAgent.NodeUnpublishVolume(ctx, "unix:///csi.sock", &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: "/t"})
	}()
	<-old.inSend

	// The agent reconnects.
	newer := &chanStream{name: "new", ctx: ctx, in: make(chan *AgentMsg, 4), log: log}
	newer.in <- hello
	newDone := make(chan error, 1)
	go func() { newDone <- s.connect(newer) }()

	var err error
	testutil.WaitFor(t, "the replaced stream to end", func() bool {
		select {
		case err = <-oldDone:
			return true
		default:
			return false
		}
	})
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("the replaced stream ended with %v, want Aborted saying it was replaced", err)
	}
	if log.has("new:welcome") {
		t.Fatalf("the new stream was welcomed while a step was still being sent on the old one: %q", log.all())
	}
	close(old.holdSteps)
	testutil.WaitFor(t, "the new stream to be welcomed", func() bool { return log.has("new:welcome") })
	if got := log.all(); strings.Join(got, " ") != "old:welcome old:step new:welcome" {
		t.Fatalf("sends %q, want the old stream's step before the new stream's welcome", got)
	}
	// The step in flight fails retryable (its result never comes on the
	// replaced stream) and a later step on the old agent is not sent.
	if err := <-stepDone; status.Code(err) != codes.Unavailable {
		t.Fatalf("the step in flight on the replaced stream: %v, want Unavailable", err)
	}
	err = oldAgent.NodeUnpublishVolume(ctx, "unix:///csi.sock", &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: "/t"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("a step on the replaced agent: %v, want Unavailable naming the replacement", err)
	}
	if got := log.all(); len(got) != 3 {
		t.Fatalf("sends after the replacement: %q", got)
	}
	if s.Agent("n1") == oldAgent || s.Agent("n1") == nil {
		t.Fatal("the node's agent is not the new stream's")
	}
	close(newer.in)
	if err := <-newDone; err != nil {
		t.Fatalf("the new stream: %v", err)
	}
}

// syncRegistrar accepts every node (safe for concurrent streams).
type syncRegistrar struct{}

func (syncRegistrar) RegisterAgentNode(_ context.Context, n *structs.Node) (*structs.Node, error) {
	return n, nil
}
