package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// storeLog applies ACL writes to a real state store, as the FSM does.
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

// aclRig is a node agent connected with its own node-scoped token to a
// server that checks it against a real ACL system over a real store.
type aclRig struct {
	svc      *acl.Service
	aclClock *clockwork.FakeClock // token expiry
	clock    *clockwork.FakeClock // the agent's heartbeats and backoff
	admin    string               // the bootstrap token's accessor
	accessor string               // the agent's token
	plugin   *csitest.Server
	srv      *nodeconn.Server
	reg      *registrar
	agent    *client.Agent
	root     string
}

// newACLRig starts the server with auth (nil: nodeconn.ACLAuth over the
// rig's ACL service) and an agent for n1 whose token grants node:write
// on n1 only and expires after ttl (0: never).
func newACLRig(t testing.TB, ttl time.Duration, auth func(*acl.Service) nodeconn.Authorizer) *aclRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	r := &aclRig{aclClock: clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
		clock: clockwork.NewFakeClock(), reg: &registrar{}, root: t.TempDir()}
	st := state.NewStore(state.WithClock(r.aclClock))
	r.svc = acl.NewService(st, &storeLog{st: st}, r.aclClock)
	boot, _, err := r.svc.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.admin = boot.AccessorID
	if _, err := r.svc.UpsertPolicy(ctx, r.admin, &structs.ACLPolicy{Name: "agent-n1", Rules: `node_id "n1" { policy = "write" }`}); err != nil {
		t.Fatal(err)
	}
	tok, secret, err := r.svc.CreateToken(ctx, r.admin, acl.NewToken{Name: "n1 agent", Policies: []string{"agent-n1"}, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	r.accessor = tok.AccessorID
	a := nodeconn.ACLAuth(r.svc.Resolver)
	if auth != nil {
		a = auth(r.svc)
	}
	r.srv = nodeconn.NewServer(nodeconn.Config{Registrar: r.reg, Leader: leader(true), HeartbeatInterval: time.Second, Auth: a})
	if err := r.srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.srv.Serve() }()
	t.Cleanup(r.srv.Stop)
	r.plugin = csitest.NewServer(t, csitest.Options{NodeID: "ext-n1", StageUnstage: true})
	r.agent, err = client.New(client.Config{Servers: []string{r.srv.Addr()}, NodeID: "n1", RootDir: r.root,
		Plugins: map[string]string{"p": r.plugin.Endpoint()}, Token: secret, Clock: r.clock,
		BackoffBase: time.Second, BackoffMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.agent.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	if err := r.agent.WaitConnected(ctx); err != nil {
		t.Fatalf("agent did not connect: %v", err)
	}
	return r
}

// stage sends a NodeStageVolume carrying a secret through agent a.
func (r *aclRig) stage(ctx context.Context, a *nodeconn.Agent) error {
	staging, _ := csi.Paths(r.root, "p", "default", "vol1", "alloc1")
	return a.NodeStageVolume(ctx, r.plugin.Endpoint(), &csipb.NodeStageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging,
		Secrets:          map[string]string{"key": "s3cr3t"},
		VolumeCapability: csi.Capability(structs.AccessSingleNodeWriter, structs.AttachFilesystem, "", nil)})
}

// registrations counts the hellos the server accepted.
func (r *aclRig) registrations() int {
	r.reg.mu.Lock()
	defer r.reg.mu.Unlock()
	return len(r.reg.nodes)
}

// A node agent's token is not checked once, when its stream opens: its
// deletion, its expiry or a policy change that takes node:write on the
// node away ends the open stream, the server sends the revoked agent no
// node step (NodeStage carries the volume's secrets), and its reconnect
// is refused before it registers anything.
func TestRevokedAgentTokenEndsItsStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ttl    time.Duration
		revoke func(ctx context.Context, t *testing.T, r *aclRig)
	}{
		{"token deleted", 0, func(ctx context.Context, t *testing.T, r *aclRig) {
			if _, err := r.svc.DeleteToken(ctx, r.admin, r.accessor); err != nil {
				t.Fatal(err)
			}
		}},
		{"token expired", time.Hour, func(_ context.Context, _ *testing.T, r *aclRig) {
			r.aclClock.Advance(time.Hour)
		}},
		{"policy narrowed to another node", 0, func(ctx context.Context, t *testing.T, r *aclRig) {
			if _, err := r.svc.UpsertPolicy(ctx, r.admin, &structs.ACLPolicy{Name: "agent-n1", Rules: `node_id "n2" { policy = "write" }`}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			r := newACLRig(t, tc.ttl, nil)
			a := r.srv.Agent("n1")
			if err := r.stage(ctx, a); err != nil {
				t.Fatalf("stage before revocation: %v", err)
			}
			tc.revoke(ctx, t, r)
			// The watch ends the stream with no message from the agent:
			// its heartbeat clock has not moved.
			testutil.WaitFor(t, "the server to drop the revoked agent's stream", func() bool {
				return r.srv.Agent("n1") == nil && r.agent.Connected() == ""
			})
			if err := r.stage(ctx, a); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not sent") {
				t.Fatalf("stage after revocation: %v, want Unavailable, not sent", err)
			}
			if n := len(r.plugin.Calls(csitest.NodeStage)); n != 1 {
				t.Fatalf("NodeStage reached the node %d times, want 1 (before the revocation only)", n)
			}
			// The agent's reconnect (one backoff on its clock) is refused.
			if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(time.Second)
			if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if r.srv.Agent("n1") != nil || r.agent.Connected() != "" || r.registrations() != 1 {
				t.Fatalf("after the reconnect: agent %v, connected %q, %d registrations, want none, \"\", 1",
					r.srv.Agent("n1"), r.agent.Connected(), r.registrations())
			}
		})
	}
}

// switchAuth accepts until refuse is set; its revocation watch never
// fires, so what refuses is the check at each message and each step.
type switchAuth struct{ refuse atomic.Bool }

func (s *switchAuth) Authorize(context.Context, string, string) error {
	if s.refuse.Load() {
		return errors.New("token revoked")
	}
	return nil
}
func (*switchAuth) Revoked(context.Context, string, string) <-chan error { return nil }

// Without the watch, the check before each node step still sends no
// secret to an agent whose token stopped holding, and its next heartbeat
// is refused and ends the stream.
func TestStepAndHeartbeatRecheckTheToken(t *testing.T) {
	ctx := ctxT(t)
	sw := &switchAuth{}
	r := newACLRig(t, 0, func(*acl.Service) nodeconn.Authorizer { return sw })
	a := r.srv.Agent("n1")
	sw.refuse.Store(true)
	if err := r.stage(ctx, a); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("stage: %v, want Unavailable, not sent", err)
	}
	if n := len(r.plugin.Calls(csitest.NodeStage)); n != 0 {
		t.Fatalf("NodeStage reached the node %d times, want 0", n)
	}
	// The step's refusal closed the agent; the stream ends at the next
	// message the agent sends: its heartbeat.
	if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(time.Second)
	testutil.WaitFor(t, "the heartbeat to be refused and the stream to end", func() bool {
		return r.srv.Agent("n1") == nil && r.agent.Connected() == ""
	})
}
