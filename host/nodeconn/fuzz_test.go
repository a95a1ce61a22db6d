package nodeconn

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/volhost/volhost/host/structs"
)

// fuzzStream is a Connect stream whose agent sends msgs, each decoded
// with the stream's codec.
type fuzzStream struct {
	msgs [][]byte
	sent []*ServerMsg
}

func (s *fuzzStream) SetHeader(metadata.MD) error  { return nil }
func (s *fuzzStream) SendHeader(metadata.MD) error { return nil }
func (s *fuzzStream) SetTrailer(metadata.MD)       {}
func (s *fuzzStream) Context() context.Context     { return context.Background() }
func (s *fuzzStream) SendMsg(m any) error {
	s.sent = append(s.sent, m.(*ServerMsg))
	return nil
}

func (s *fuzzStream) RecvMsg(m any) error {
	if len(s.msgs) == 0 {
		return io.EOF
	}
	b := s.msgs[0]
	s.msgs = s.msgs[1:]
	return jsonCodec{}.Unmarshal(b, m)
}

// recordingRegistrar keeps the nodes registered.
type recordingRegistrar struct{ nodes []*structs.Node }

func (r *recordingRegistrar) RegisterAgentNode(_ context.Context, n *structs.Node) (*structs.Node, error) {
	r.nodes = append(r.nodes, n)
	return n, nil
}

type alwaysLeader struct{}

func (alwaysLeader) IsLeader() bool            { return true }
func (alwaysLeader) Leader() (addr, id string) { return "127.0.0.1:4748", "s1" }

// FuzzAgentMessages: whatever a node agent sends on its stream (one
// message a line), the server ends the stream with an error or cleanly,
// never panics; it registers a node only from a first hello that names
// one, and welcomes only a registered agent.
func FuzzAgentMessages(f *testing.F) {
	line := func(m *AgentMsg) []byte {
		b, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	hello := line(&AgentMsg{Hello: &Hello{Node: &structs.Node{ID: "n1", Plugins: map[string]*structs.NodePlugin{"ebs": {Endpoint: "unix:///csi.sock"}}}}})
	beat := line(&AgentMsg{Heartbeat: &Heartbeat{Seq: 1}})
	result := line(&AgentMsg{Result: &StepResult{ID: 1, Code: 0}})
	f.Add(bytes.Join([][]byte{hello, beat, result, result, beat}, []byte("\n")))
	f.Add(bytes.Join([][]byte{beat, hello}, []byte("\n")))
	f.Add([]byte(`{"hello":{"node":null}}`))
	f.Add([]byte(`{"hello":{"node":{"id":"n1","plugins":{"x":null}}}}` + "\n" + `{"result":null,"heartbeat":{}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		reg := &recordingRegistrar{}
		s := NewServer(Config{Registrar: reg, Leader: alwaysLeader{}})
		st := &fuzzStream{msgs: bytes.Split(in, []byte("\n"))}
		_ = s.connect(st)
		for _, n := range reg.nodes {
			if n == nil || n.ID == "" {
				t.Fatalf("registered a node without an ID: %+v", n)
			}
		}
		if len(st.sent) > 0 && st.sent[0].Welcome != nil && len(reg.nodes) != 1 {
			t.Fatalf("welcomed after %d registrations", len(reg.nodes))
		}
		if len(s.Connected()) != 0 {
			t.Fatal("an agent stays connected after its stream ended")
		}
	})
}
