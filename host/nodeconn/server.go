package nodeconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/keylock"
	"github.com/volhost/volhost/watcher/attach"
)

// Registrar records a node as its agent reported it (host/server).
type Registrar interface {
	RegisterAgentNode(ctx context.Context, n *structs.Node) (*structs.Node, error)
}

// Leader says whether this server leads, and where the leader is.
type Leader interface {
	IsLeader() bool
	Leader() (addr, id string)
}

// Authorizer checks a node agent's token (ACLs on).
type Authorizer interface {
	// Authorize checks now that token may act as the agent of nodeID
	// (node:write on it).
	Authorize(ctx context.Context, token, nodeID string) error
	// Revoked yields why, once token stops passing Authorize for nodeID
	// (deleted, expired, its policies changed); nothing once ctx ends.
	Revoked(ctx context.Context, token, nodeID string) <-chan error
}

// AccessorOf is implemented by an Authorizer whose tokens have
// accessors (ACLs on): the accessor of token is recorded on the node it
// registers (structs.Node.RegisteredBy), so the state store refuses the
// registration if the token is revoked before it commits, and judges its
// operator fields by the token's policies then (structs.AnonymousAccessor
// for a hello without a token: the anonymous policy's).
type AccessorOf interface {
	AccessorOf(token string) (string, error)
}

// OperatorOf is implemented by an Authorizer that says whether a token may
// make an operator's decisions (operator:write; every caller may with ACLs
// off).
type OperatorOf interface {
	MayOperate(token string) (bool, error)
}

// NodeReader is implemented by a Registrar that reads the node registered
// under an ID (nil when none is).
type NodeReader interface {
	RegisteredNode(id string) (*structs.Node, error)
}

// Config wires a Server.
type Config struct {
	Registrar Registrar
	Leader    Leader
	Tracker   *Tracker
	// Auth checks the agent's token when its stream opens, at every
	// message it sends, before every node step, and watches it for
	// revocation; nil accepts every agent (ACLs off).
	Auth Authorizer
	// TLS, when set, serves mutual TLS (tls.rpc).
	TLS *tls.Config
	// HeartbeatInterval is what agents are told to heartbeat at.
	HeartbeatInterval time.Duration
	Logger            hclog.Logger
}

// Server accepts node agents' connections and sends them node steps.
type Server struct {
	cfg  Config
	log  hclog.Logger
	grpc *grpc.Server
	lis  net.Listener

	mu    sync.Mutex
	conns map[string]*Agent // by node ID: the latest connection

	// registering orders, per node, the registrations its streams make
	// with the streams' replacement: a first hello commits and installs
	// its stream under it, and a later hello commits only while its
	// stream is still the node's. Without it a replaced stream's update,
	// committed after its replacement's hello, left the store with the
	// old report and the connected agent, which registers again only on
	// a change, never correcting it.
	registering keylock.Set[string]
}

// NewServer returns a Server; Serve starts it.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Server{cfg: cfg, log: cfg.Logger.Named("nodeconn"), conns: map[string]*Agent{}}
	var opts []grpc.ServerOption
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.grpc = grpc.NewServer(opts...)
	s.grpc.RegisterService(&grpc.ServiceDesc{
		ServiceName: "volhost.nodeconn.v1.NodeConn",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Connect", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error { return s.connect(stream) }}},
	}, s)
	return s
}

// Listen opens addr; Serve then serves it.
func (s *Server) Listen(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("node_rpc: listen on %s: %w", addr, err)
	}
	s.lis = lis
	return nil
}

// Addr is the address Listen opened.
func (s *Server) Addr() string {
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// Serve serves until Stop.
func (s *Server) Serve() error {
	err := s.grpc.Serve(s.lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop closes every agent's stream and the listener.
func (s *Server) Stop() { s.grpc.Stop() }

// NodeAgent implements attach.NodeAgents, for the claim path and the
// watcher alike.
func (s *Server) NodeAgent(nodeID string) (attach.NodeSteps, bool) {
	if a := s.Agent(nodeID); a != nil {
		return a, true
	}
	return nil, false
}

// Connected lists the nodes whose agents are connected here.
func (s *Server) Connected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.conns))
	for id := range s.conns {
		out = append(out, id)
	}
	return out
}

// Agent is node's connected agent, nil when none is connected here.
func (s *Server) Agent(nodeID string) *Agent {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.conns[nodeID]; a != nil {
		return a
	}
	return nil
}

// connect serves one agent's stream: hello, registration, then heartbeats
// and step results until the stream ends.
func (s *Server) connect(stream grpc.ServerStream) error {
	ctx := stream.Context()
	var first AgentMsg
	if err := stream.RecvMsg(&first); err != nil {
		return err
	}
	if first.Hello == nil || first.Hello.Node == nil || first.Hello.Node.ID == "" {
		return status.Error(codes.InvalidArgument, "the first message must be a hello naming the node")
	}
	node := first.Hello.Node
	token := tokenOf(ctx)
	authorize := func(ctx context.Context) error {
		if s.cfg.Auth == nil {
			return nil
		}
		if err := s.cfg.Auth.Authorize(ctx, token, node.ID); err != nil {
			return status.Errorf(codes.PermissionDenied, "node agent of %q: %v", node.ID, err)
		}
		return nil
	}
	if err := authorize(ctx); err != nil {
		return err
	}
	if !s.cfg.Leader.IsLeader() {
		addr, _ := s.cfg.Leader.Leader()
		return stream.SendMsg(&ServerMsg{NotLeader: &NotLeader{Leader: addr}})
	}
	unlock, err := s.registering.Lock(ctx, node.ID)
	if err != nil {
		return status.FromContextError(err).Err()
	}
	if err := s.register(ctx, token, node); err != nil {
		unlock()
		return err
	}
	a := &Agent{nodeID: node.ID, stream: stream, authorize: authorize, pending: map[uint64]chan *StepResult{}, done: make(chan struct{})}
	s.mu.Lock()
	old := s.conns[node.ID]
	s.conns[node.ID] = a
	s.mu.Unlock()
	unlock()
	if old != nil {
		// A reconnect replaces the stream: the old one ends Aborted and
		// sends nothing more. replace returns once a send in progress on
		// it is over, so no step goes down the old stream after the new
		// one is welcomed.
		old.replace()
		s.log.Info("node agent stream replaced by a newer one", "node", node.ID)
	}
	defer func() {
		s.mu.Lock()
		if s.conns[node.ID] == a {
			delete(s.conns, node.ID)
		}
		s.mu.Unlock()
		a.close()
	}()
	// sendOpen: a stream a newer one replaced meanwhile is not welcomed
	// (the agent would keep a session the server already ended).
	if err := a.sendOpen(&ServerMsg{Welcome: &Welcome{HeartbeatIntervalMs: s.cfg.HeartbeatInterval.Milliseconds(), AcksHeartbeats: true, TakesUpdates: true}}); err != nil {
		return err
	}
	s.log.Info("node agent connected", "node", node.ID, "plugins", len(node.Plugins))
	s.beat(ctx, node.ID)
	// A token is not checked once for the life of the stream: its
	// revocation (deletion, expiry, a policy change) ends the stream the
	// moment it is committed, and every message is checked again, so a
	// revoked agent neither keeps its node ready nor receives a node step
	// (with the volume's secrets) after it.
	var revoked <-chan error
	if s.cfg.Auth != nil {
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		revoked = s.cfg.Auth.Revoked(watchCtx, token, node.ID)
	}
	msgs, stopRecv := receive(stream)
	defer stopRecv()
	updates, updated, stopUpdates := s.updater(ctx, token, a)
	defer stopUpdates()
	for {
		var m *AgentMsg
		select {
		case err := <-updated:
			// A later hello's registration was refused, or this server
			// no longer leads (the agent was sent away): the stream ends.
			if errors.Is(err, errSentAway) {
				return nil
			}
			return err
		case <-a.done:
			// Closed from outside: a newer stream for the same node
			// replaced this one (the agent reconnected, or a second
			// agent claims the node). Its heartbeats must not keep the
			// node ready, and the agent is told why.
			return status.Errorf(codes.Aborted, "node agent of %q: this stream was replaced by a newer stream for the same node", node.ID)
		case err := <-revoked:
			a.revoke(err)
			s.log.Warn("node agent disconnected: its token was revoked", "node", node.ID, "reason", err)
			return status.Errorf(codes.PermissionDenied, "node agent of %q: %v", node.ID, err)
		case r := <-msgs:
			if r.err != nil {
				s.log.Info("node agent disconnected", "node", node.ID, "error", r.err)
				return nil
			}
			m = r.msg
		}
		if err := authorize(ctx); err != nil {
			a.revoke(err)
			s.log.Warn("node agent refused: its token no longer holds", "node", node.ID, "error", err)
			return err
		}
		switch {
		case m.Heartbeat != nil:
			if !s.cfg.Leader.IsLeader() {
				// Stepped down: the agent must find the new leader before
				// its heartbeat TTL runs out there, so it is sent away.
				addr, _ := s.cfg.Leader.Leader()
				_ = a.send(&ServerMsg{NotLeader: &NotLeader{Leader: addr}})
				s.log.Info("node agent sent to the new leader", "node", node.ID, "leader", addr)
				return nil
			}
			s.beat(ctx, node.ID)
			// A failed send ends the stream, which the next read sees.
			_ = a.sendOpen(&ServerMsg{HeartbeatAck: &Heartbeat{Seq: m.Heartbeat.Seq}})
		case m.Result != nil:
			a.deliver(m.Result)
		case m.Hello != nil:
			// The agent probed its plugins again and they answer
			// otherwise (one stopped or started answering).
			update := m.Hello.Node
			if update == nil || update.ID != node.ID {
				return status.Errorf(codes.InvalidArgument, "node agent of %q: a later hello must name the same node", node.ID)
			}
			updates.put(update)
		}
	}
}

// errSentAway ends a stream whose later hello reached a server that no
// longer leads: the agent was told (NotLeader) and finds the leader.
var errSentAway = errors.New("sent to the leader")

// latest holds the newest node a later hello reported and not yet
// registered: one registration at a time, and a report that a newer one
// overtook is never registered.
type latest struct {
	mu    sync.Mutex
	node  *structs.Node
	ready chan struct{} // cap 1: node is set
}

func (l *latest) put(n *structs.Node) {
	l.mu.Lock()
	l.node = n
	l.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

func (l *latest) take() *structs.Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.node
	l.node = nil
	return n
}

// updater registers the later hellos of a's stream in their own
// goroutine, so the stream's loop goes on acknowledging heartbeats and
// delivering step results while a registration waits for raft (or for
// the node's registration order): a slow commit of one plugin's change
// made the agent take its leader for silent, and could let the node's
// heartbeat TTL run out. Its answer, when the stream must end, comes on
// the returned channel; stop ends the goroutine and waits for it.
func (s *Server) updater(ctx context.Context, token string, a *Agent) (*latest, <-chan error, func()) {
	l := &latest{ready: make(chan struct{}, 1)}
	out := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.ready:
			}
			n := l.take()
			if n == nil {
				continue
			}
			if !s.cfg.Leader.IsLeader() {
				addr, _ := s.cfg.Leader.Leader()
				_ = a.send(&ServerMsg{NotLeader: &NotLeader{Leader: addr}})
				out <- errSentAway
				return
			}
			if err := s.reregister(ctx, token, a, n); err != nil {
				s.log.Warn("node agent's new registration refused", "node", a.nodeID, "error", err)
				out <- err
				return
			}
			s.log.Info("node agent registered its node again", "node", a.nodeID)
		}
	}()
	return l, out, func() { cancel(); <-done }
}

// reregister commits a later hello of a's stream, unless a newer stream
// for the node replaced it (registering says why).
func (s *Server) reregister(ctx context.Context, token string, a *Agent, node *structs.Node) error {
	unlock, err := s.registering.Lock(ctx, node.ID)
	if err != nil {
		return status.FromContextError(err).Err()
	}
	defer unlock()
	s.mu.Lock()
	current := s.conns[node.ID] == a
	s.mu.Unlock()
	if !current {
		return status.Errorf(codes.Aborted, "node agent of %q: this stream was replaced by a newer stream for the same node; its update is not registered", node.ID)
	}
	return s.register(ctx, token, node)
}

// register commits node as its agent reported it, under token.
func (s *Server) register(ctx context.Context, token string, node *structs.Node) error {
	// The server says which token registered the node; an agent's own
	// claim is never believed.
	node.RegisteredBy = ""
	if ao, ok := s.cfg.Auth.(AccessorOf); ok {
		acc, err := ao.AccessorOf(token)
		if err != nil {
			return status.Errorf(codes.PermissionDenied, "node agent of %q: %v", node.ID, err)
		}
		node.RegisteredBy = acc
	}
	if err := s.keepOperatorNode(token, node); err != nil {
		return err
	}
	if _, err := s.cfg.Registrar.RegisterAgentNode(ctx, node); err != nil {
		code := codes.InvalidArgument
		if errors.Is(err, structs.ErrPermissionDenied) {
			code = codes.PermissionDenied // revoked before the registration committed
		}
		return status.Errorf(code, "register node %q: %v", node.ID, err)
	}
	return nil
}

// received is one message read from an agent's stream, or why reading
// stopped.
type received struct {
	msg *AgentMsg
	err error
}

// receive reads stream in its own goroutine, so the handler can end the
// stream (a revoked token) while a read is blocked: the read then fails
// as the stream closes. stop, called before the handler returns, lets
// the goroutine end without anyone left to take its last message.
func receive(stream grpc.ServerStream) (<-chan received, func()) {
	out := make(chan received)
	quit := make(chan struct{})
	go func() {
		for {
			m := new(AgentMsg)
			err := stream.RecvMsg(m)
			select {
			case out <- received{msg: m, err: err}:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out, func() { close(quit) }
}

func (s *Server) beat(ctx context.Context, nodeID string) {
	if s.cfg.Tracker != nil {
		s.cfg.Tracker.Beat(ctx, nodeID)
	}
}

func tokenOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(TokenMetadata); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Agent is one connected node agent: the node steps sent to it run on its
// node, against the plugin sockets it registered. It implements the
// node-step interface (attach.NodeSteps) the claim path and the watcher
// share.
type Agent struct {
	nodeID string
	stream grpc.ServerStream
	// authorize checks the stream's token for nodeID again (nil error
	// with ACLs off).
	authorize func(context.Context) error
	sendMu    sync.Mutex

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan *StepResult
	done    chan struct{}
	closed  bool
	revoked error // why the stream's token stopped holding, once it did
	// replaced: a newer stream for the same node took this one's place.
	replaced bool
}

// NodeID is the node this agent was authorized to serve: the claim path
// and the watcher find it by that ID, so its steps are the node's own.
func (a *Agent) NodeID() string { return a.nodeID }

func (a *Agent) send(m *ServerMsg) error {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	return a.stream.SendMsg(m)
}

// errClosed is the send of a message on a closed agent.
var errClosed = errors.New("the node agent's stream is closed")

// sendOpen sends m unless the agent is closed, checked under the send
// lock: replace, which takes that lock after marking the agent closed,
// thus orders every send either before it returns or not at all.
func (a *Agent) sendOpen(m *ServerMsg) error {
	return a.sendOpenFenced(context.Background(), m) // no fence in it
}

// sendOpenFenced is sendOpen with the leader's fence (attach.Fence)
// checked once the send lock is held: a step that waited for the lock
// behind another message is not sent on an expired confirmation.
func (a *Agent) sendOpenFenced(ctx context.Context, m *ServerMsg) error {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return errClosed
	}
	if err := attach.Fence(ctx); err != nil {
		return err
	}
	return a.stream.SendMsg(m)
}

// replace closes the agent because a newer stream for its node was
// accepted, and returns once no send is in progress on it: the handler
// of its stream ends (Aborted), which cancels the stream and so unblocks
// a send stuck on flow control.
func (a *Agent) replace() {
	a.mu.Lock()
	a.replaced = true
	a.mu.Unlock()
	a.close()
	// Taking the send lock waits for the send in progress; it guards
	// nothing after that.
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
}

// revoke closes the agent because its token no longer holds: steps in
// flight and later ones fail, none is sent.
func (a *Agent) revoke(err error) {
	a.mu.Lock()
	if a.revoked == nil {
		a.revoked = err
	}
	a.mu.Unlock()
	a.close()
}

// gone is the error of a step on a closed agent.
func (a *Agent) gone(method string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.revoked != nil {
		// Unavailable, not PermissionDenied: the driver refused nothing,
		// and a release step classed fatal would strand its claim when an
		// operator rotates a node's token. It is retried once the agent
		// reconnects with a valid one.
		return status.Errorf(codes.Unavailable, "%s not sent to the node agent of %q: its token no longer holds (%v)", method, a.nodeID, a.revoked)
	}
	if a.replaced {
		return status.Errorf(codes.Unavailable, "%s not sent on a replaced stream of the node agent of %q: retried on its newer stream", method, a.nodeID)
	}
	// The step may have run: Unavailable is retried, and every node
	// step is idempotent (CSI spec).
	return status.Errorf(codes.Unavailable, "node agent of %q disconnected (%s)", a.nodeID, method)
}

func (a *Agent) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.closed = true
		close(a.done)
	}
}

func (a *Agent) deliver(r *StepResult) {
	a.mu.Lock()
	ch := a.pending[r.ID]
	delete(a.pending, r.ID)
	a.mu.Unlock()
	if ch != nil {
		ch <- r
	}
}

// step sends one node step and waits for its result, ctx's end (the step
// is then cancelled on the node) or the stream's end.
func (a *Agent) step(ctx context.Context, method, endpoint string, req proto.Message) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return status.Errorf(codes.Internal, "encode %s: %v", method, err)
	}
	// NodeStage and NodePublish carry the volume's secrets: the token is
	// checked again right before any step goes out, not only when the
	// stream opened, so a revoked agent is sent none (the watch closes
	// the stream too, but a step may be issued between the commit and
	// the watch waking).
	if err := a.authorize(ctx); err != nil {
		a.revoke(err)
		return a.gone(method)
	}
	ch := make(chan *StepResult, 1)
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return a.gone(method)
	}
	a.next++
	id := a.next
	a.pending[id] = ch
	a.mu.Unlock()
	forget := func() {
		a.mu.Lock()
		delete(a.pending, id)
		a.mu.Unlock()
	}
	sr := &StepRequest{ID: id, Method: method, Endpoint: endpoint, Request: body, Key: attach.StepKey(ctx)}
	if dl, ok := ctx.Deadline(); ok {
		sr.DeadlineUnixNano = dl.UnixNano()
	}
	// The leader's fence, checked again right before the step is sent,
	// under the send lock (attach.Call says why).
	if err := a.sendOpenFenced(ctx, &ServerMsg{Step: sr}); err != nil {
		forget()
		var ns *attach.NotSent
		if errors.As(err, &ns) {
			return err
		}
		if errors.Is(err, errClosed) {
			return a.gone(method)
		}
		return status.Errorf(codes.Unavailable, "send %s to the node agent of %q: %v", method, a.nodeID, err)
	}
	select {
	case r := <-ch:
		if r.Code == 0 {
			return nil
		}
		return status.Error(codes.Code(r.Code), r.Message)
	case <-ctx.Done():
		forget()
		_ = a.sendOpen(&ServerMsg{Cancel: &Cancel{ID: id}})
		return status.FromContextError(ctx.Err()).Err()
	case <-a.done:
		forget()
		return a.gone(method)
	}
}

// AckStep implements attach.StepAcker: it tells the agent that the
// keyed step's outcome is committed. Best effort: an ack lost with the
// stream leaves the entry to the journal's TTL.
func (a *Agent) AckStep(key string) {
	if key == "" {
		return
	}
	_ = a.sendOpen(&ServerMsg{Ack: &Ack{Key: key}})
}

// NodeStageVolume runs NodeStageVolume on the agent's node.
func (a *Agent) NodeStageVolume(ctx context.Context, endpoint string, req *csipb.NodeStageVolumeRequest) error {
	return a.step(ctx, MethodStage, endpoint, req)
}

// NodePublishVolume runs NodePublishVolume on the agent's node.
func (a *Agent) NodePublishVolume(ctx context.Context, endpoint string, req *csipb.NodePublishVolumeRequest) error {
	return a.step(ctx, MethodPublish, endpoint, req)
}

// NodeUnpublishVolume runs NodeUnpublishVolume on the agent's node.
func (a *Agent) NodeUnpublishVolume(ctx context.Context, endpoint string, req *csipb.NodeUnpublishVolumeRequest) error {
	return a.step(ctx, MethodUnpublish, endpoint, req)
}

// NodeUnstageVolume runs NodeUnstageVolume on the agent's node.
func (a *Agent) NodeUnstageVolume(ctx context.Context, endpoint string, req *csipb.NodeUnstageVolumeRequest) error {
	return a.step(ctx, MethodUnstage, endpoint, req)
}

// keepOperatorNode refuses a hello that would replace a node an operator
// registered in direct mode (its plugin endpoints, which the leader dials,
// its root_dir, a status it set: structs.OperatorDecisionsReplaced)
// unless the agent's token may make an operator's decisions. A hello
// replaces the node whole: with its node token alone an agent took over
// such a node, dropped the operator's endpoints and root_dir and had the
// node's steps, with its volumes' secrets, sent down its own stream, which
// the API refuses the same token (checkNodeRegistration, host/api). This
// is the early answer; the store judges the registration again when it
// commits (structs.NodeUpsertRequest.HoldOperatorFields).
func (s *Server) keepOperatorNode(token string, node *structs.Node) error {
	nodeID := node.ID
	op, ok1 := s.cfg.Auth.(OperatorOf)
	nodes, ok2 := s.cfg.Registrar.(NodeReader)
	if !ok1 || !ok2 {
		return nil
	}
	old, err := nodes.RegisteredNode(nodeID)
	if err != nil {
		return status.Errorf(codes.Unavailable, "read node %q: %v", nodeID, err)
	}
	reason := structs.OperatorDecisionsReplaced(structs.ByItsAgent, old, node)
	if reason == "" {
		return nil
	}
	may, err := op.MayOperate(token)
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "node agent of %q: %v", nodeID, err)
	}
	if may {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "node agent of %q: %s without %s: an operator deregisters it first (`volhost node deregister %s`), "+
		"or registers it with agent = true", nodeID, reason, acl.OperatorWrite, nodeID)
}
