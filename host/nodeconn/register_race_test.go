package nodeconn

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// storeLog applies writes to a real state store, as the FSM does.
type storeLog struct {
	mu  sync.Mutex
	st  *state.Store
	idx uint64
}

func (l *storeLog) Apply(_ context.Context, t structs.MessageType, req any) (uint64, any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.idx++
	resp, err := l.st.Apply(l.idx, t, req)
	return l.idx, resp, err
}

// racingRegistrar revokes the agent's token between the hello's check
// and the registration's write, then registers as host/server does.
type racingRegistrar struct {
	log    *storeLog
	revoke func()
	now    time.Time
}

func (r *racingRegistrar) RegisterAgentNode(ctx context.Context, n *structs.Node) (*structs.Node, error) {
	r.revoke()
	n = n.Copy()
	n.Agent, n.Status, n.LastSeen = true, structs.NodeReady, r.now
	if _, _, err := r.log.Apply(ctx, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n}); err != nil {
		return nil, err
	}
	return n, nil
}

// A hello authorized with a token that is revoked before the node's
// registration commits registers nothing: the stream ends
// PermissionDenied, the node is not in the store, no agent serves it.
// The accessor the registration carries is the server's (the token's),
// not what the agent's hello claims.
func TestRegistrationRacingRevocationIsRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	st := state.NewStore(state.WithClock(clk))
	log := &storeLog{st: st}
	svc := acl.NewService(st, log, clk)
	boot, _, err := svc.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.UpsertPolicy(ctx, boot.AccessorID, &structs.ACLPolicy{Name: "agent-n1", Rules: `node_id "n1" { policy = "write" }`}); err != nil {
		t.Fatal(err)
	}
	tok, secret, err := svc.CreateToken(ctx, boot.AccessorID, acl.NewToken{Name: "n1 agent", Policies: []string{"agent-n1"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := &racingRegistrar{log: log, now: clk.Now(), revoke: func() {
		if _, err := svc.DeleteToken(ctx, boot.AccessorID, tok.AccessorID); err != nil {
			t.Error(err)
		}
	}}
	s := NewServer(Config{Registrar: reg, Leader: alwaysLeader{}, Auth: ACLAuth(svc.Resolver)})
	sendLog := &sendLog{}
	stream := &chanStream{name: "agent", ctx: metadata.NewIncomingContext(ctx, metadata.Pairs(TokenMetadata, secret)),
		in: make(chan *AgentMsg, 1), log: sendLog}
	// The hello claims to be registered by the management token.
	stream.in <- &AgentMsg{Hello: &Hello{Node: &structs.Node{ID: "n1", RegisteredBy: boot.AccessorID}}}
	err = s.connect(stream)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "revoked before the registration committed") {
		t.Fatalf("hello racing its token's revocation: %v, want PermissionDenied", err)
	}
	if n, err := st.Snapshot().NodeByID(nil, "n1"); err != nil || n != nil {
		t.Fatalf("node n1 = %+v (%v), want not registered", n, err)
	}
	if s.Agent("n1") != nil || len(sendLog.all()) != 0 {
		t.Fatalf("agent %v, sent %q: want no agent and nothing sent", s.Agent("n1"), sendLog.all())
	}
}
