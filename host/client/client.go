// Package client is the node agent (`volhost agent -client`): one per node.
// It probes the node's CSI plugins on their local sockets, opens one
// long-lived connection to the servers (any of them; it follows the
// leader), registers its node there, heartbeats on the connection, and
// runs the node steps the leader sends (NodeStage, NodePublish,
// NodeUnpublish, NodeUnstage) against the local sockets, with the leader's
// deadline and the directory work the CSI spec leaves to the CO
// (host/nodestep).
//
// It keeps no claim state of its own: which claims are staged or published
// on the node is what the servers' committed claims say, and the leader
// decides every unstage from them (watcher lastOnNodeCommitted), so a
// restarted agent resumes without a refcount to rebuild (Nomad #25813:
// staging refcounts kept in the client's memory were lost on restart).
// What it does keep is a journal of the release steps it ran (journal.go),
// so a leader's retry of one whose answer was lost is not run twice.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/host/nodestep"
	"github.com/volhost/volhost/host/structs"
)

const (
	// connectTimeout bounds one connection attempt to a server (TCP, TLS
	// and HTTP/2 handshakes).
	connectTimeout = 5 * time.Second
	// silentAfter is how many heartbeat intervals without a word from a
	// leader that acknowledges heartbeats end the session.
	silentAfter = 3
)

// The probe defaults (Config.ProbeInterval, Config.ProbeTimeout): a
// plugin that stops answering is reported within about 15 s, and a
// Probe that hangs holds nothing else up for longer than 5 s.
const (
	DefaultProbeInterval = 10 * time.Second
	DefaultProbeTimeout  = 5 * time.Second
)

// Config configures a node agent.
type Config struct {
	// Servers are the servers' node RPC addresses (host:port); the agent
	// tries them in turn until one leads.
	Servers []string
	NodeID  string
	// RootDir holds every staging and target path (host/csi.Paths); the
	// agent refuses paths outside it.
	RootDir string
	// Plugins maps plugin IDs to their local node plugin sockets
	// (unix:///run/csi/gce-pd.sock).
	Plugins map[string]string
	Meta    map[string]string
	// Token is the ACL token secret (node:write on this node).
	Token string
	// TLS, when set, dials with mutual TLS (tls.rpc).
	TLS *tls.Config
	// CallTimeout bounds a step that arrives without a deadline.
	CallTimeout time.Duration
	// HelloTimeout bounds the wait for a server's answer to the hello (a
	// leader registers the node through raft before it welcomes the
	// agent); default 10 s.
	HelloTimeout time.Duration
	// ProbeTimeout bounds the probe of one plugin (Probe, NodeGetInfo,
	// NodeGetCapabilities, GetPluginCapabilities); default 5 s. A plugin
	// that does not answer within it is registered as not answering.
	ProbeTimeout time.Duration
	// ProbeInterval is how often a connected agent probes its plugins
	// again, and registers the node again when one stopped or started
	// answering; default 10 s.
	ProbeInterval time.Duration
	// BackoffBase and BackoffMax bound the reconnect backoff.
	BackoffBase, BackoffMax time.Duration
	Clock                   clockwork.Clock
	Logger                  hclog.Logger
}

// Agent is a running node agent.
type Agent struct {
	cfg   Config
	log   hclog.Logger
	csi   *csi.Client
	steps *nodestep.Executor
	// journal answers a leader's retry of a keyed release step that
	// already succeeded here (exactly one NodeUnpublish per claim).
	journal *journal
	// sockets are the endpoints the agent serves; a step naming another
	// is refused (a server never makes a node dial an arbitrary address).
	sockets map[string]bool

	mu        sync.Mutex
	connected string // server address while connected
	changed   chan struct{}
	// interval is the heartbeat interval the last leader gave: the
	// reconnect backoff's ceiling (Run).
	interval time.Duration
	// failures counts each server's consecutive failures (try).
	failures map[string]int
}

// New validates cfg and returns an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	var errs []error
	if cfg.NodeID == "" {
		errs = append(errs, errors.New("client.node_id is required"))
	}
	if len(cfg.Servers) == 0 {
		errs = append(errs, errors.New("client.servers: at least one server's node RPC address is required"))
	}
	if cfg.RootDir == "" {
		errs = append(errs, errors.New("client.root_dir is required: staging and target directories are created under it"))
	}
	if len(cfg.Plugins) == 0 {
		errs = append(errs, errors.New(`client: at least one plugin "ID" { socket = "unix:///..." } block is required`))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 2 * time.Minute
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 10 * time.Second
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 500 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		// The default heartbeat interval: an agent that was never
		// welcomed (started during an outage) does not know its leader's.
		cfg.BackoffMax = nodeconn.DefaultHeartbeatInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	log := cfg.Logger.Named("client")
	j, err := openJournal(cfg.RootDir, cfg.Clock)
	if err != nil {
		return nil, fmt.Errorf("client.root_dir %s: %w", cfg.RootDir, err)
	}
	c := csi.New(csi.Config{CallTimeout: cfg.CallTimeout, Logger: log.Named("csi"), Caller: cfg.NodeID})
	a := &Agent{cfg: cfg, log: log, csi: c, steps: &nodestep.Executor{CSI: c, Root: cfg.RootDir}, journal: j,
		sockets: map[string]bool{}, changed: make(chan struct{}), failures: map[string]int{}}
	for _, s := range cfg.Plugins {
		a.sockets[s] = true
	}
	return a, nil
}

// Connected is the server the agent is connected to, "" while it is not.
func (a *Agent) Connected() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.connected
}

// WaitConnected blocks until the agent is connected or ctx ends.
func (a *Agent) WaitConnected(ctx context.Context) error {
	for {
		a.mu.Lock()
		ok, ch := a.connected != "", a.changed
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (a *Agent) setConnected(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.connected = addr
	close(a.changed)
	a.changed = make(chan struct{})
}

// Run connects and serves until ctx ends, and connects again whenever
// the connection ends.
func (a *Agent) Run(ctx context.Context) error {
	defer a.csi.Close()
	for {
		l, err := a.connect(ctx)
		if err != nil {
			return nil // ctx ended
		}
		err = a.serve(ctx, l)
		if ctx.Err() != nil {
			return nil
		}
		// One short jittered wait spreads the agents a failover
		// disconnects at once (no thundering herd on the new leader).
		d := a.backoff(1)
		a.log.Info("disconnected from the leader; reconnecting", "server", l.addr, "error", err, "retry_in", d)
		if !a.wait(ctx, d) {
			return nil
		}
	}
}

// wait waits d on the agent's clock, false if ctx ended first. Its timer
// is stopped either way (an abandoned one would stay on a fake clock).
func (a *Agent) wait(ctx context.Context, d time.Duration) bool {
	t := a.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.Chan():
		return true
	}
}

// connect tries every server at once, each on its own schedule (try), and
// keeps the first that welcomes the agent; the others stop. Trying them
// in turn made each a wait for the next: with a backoff that grew per
// server, an agent reconnected 14 s after its leader was killed, past the
// new leader's 5 s TTL and grace, so its node was marked down and its
// claims held; and a server that takes the connection and never answers
// (a host down, a wedged process) cost every round its whole timeout.
// Only the leader welcomes an agent, so only one registers it.
func (a *Agent) connect(ctx context.Context) (*link, error) {
	race, lost := context.WithCancel(ctx)
	defer lost()
	won := make(chan *link)
	var wg sync.WaitGroup
	for _, addr := range a.cfg.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.try(ctx, race, addr, won)
		}()
	}
	var l *link
	select {
	case l = <-won:
	case <-ctx.Done():
	}
	lost()
	wg.Wait()
	if l == nil {
		return nil, ctx.Err()
	}
	return l, nil
}

// try says hello to addr until it welcomes the agent, and hands the link
// to connect, or until race ends. Between attempts it backs off
// exponentially with jitter, never longer than the heartbeat interval the
// last leader gave: an agent that waited longer between tries than
// between heartbeats could reach a new leader after its step-up grace.
func (a *Agent) try(ctx, race context.Context, addr string, won chan<- *link) {
	// A server that failed last time (a refused hello, or a session that
	// ended before its first heartbeat interval) waits out its backoff
	// first: one that welcomes and drops every stream at once would
	// otherwise win every race, each a fresh start, and keep the agent
	// from the leader behind a raft commit.
	if n := a.strikes(addr, 0); n > 0 && !a.wait(race, a.backoff(n)) {
		return
	}
	for {
		l, err := a.hello(ctx, race, addr)
		if err == nil {
			select {
			case won <- l:
			case <-race.Done():
				l.close()
			}
			return
		}
		if race.Err() != nil {
			return // lost the race: not this server's failure
		}
		n := a.strikes(addr, 1)
		d := a.backoff(n)
		if n == 1 {
			a.log.Info("not connected to a leader; retrying", "server", addr, "error", err, "retry_in", d)
		} else {
			a.log.Debug("not connected to a leader; retrying", "server", addr, "error", err, "retry_in", d)
		}
		if !a.wait(race, d) {
			return
		}
	}
}

// strikes adds add to addr's consecutive failures and returns them.
func (a *Agent) strikes(addr string, add int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failures[addr] += add
	return a.failures[addr]
}

// sessionEnded counts a session that ended before one heartbeat interval
// as its server's failure; a longer one clears every server's.
func (a *Agent) sessionEnded(addr string, lasted, interval time.Duration) {
	if lasted < interval {
		a.strikes(addr, 1)
		return
	}
	a.mu.Lock()
	clear(a.failures)
	a.mu.Unlock()
}

// backoff is the wait after the given number of failed attempts:
// exponential from BackoffBase with jitter in its upper half, capped at
// BackoffMax and at the heartbeat interval the last leader gave (but not
// below BackoffBase: a tiny interval must not make a tight loop).
func (a *Agent) backoff(attempt int) time.Duration {
	ceiling := a.cfg.BackoffMax
	if iv := a.heartbeatInterval(); iv > 0 {
		// Known once a leader welcomed the agent; before, BackoffMax.
		ceiling = min(ceiling, max(iv, a.cfg.BackoffBase))
	}
	d := a.cfg.BackoffBase << min(attempt-1, 16)
	if d > ceiling || d <= 0 {
		d = ceiling
	}
	return d/2 + rand.N(d/2+1)
}

func (a *Agent) heartbeatInterval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.interval
}

// link is a stream a leader welcomed.
type link struct {
	addr    string
	node    *structs.Node // as the hello registered it
	cc      *grpc.ClientConn
	stream  grpc.ClientStream
	ctx     context.Context // the stream's; ends with it
	cancel  context.CancelFunc
	welcome *nodeconn.Welcome
}

func (l *link) close() {
	l.cancel()
	_ = l.cc.Close()
}

// hello opens a stream to addr and says hello: a welcome is a link, a
// refusal (not the leader, an error) is an error. The stream lives on
// ctx; until the welcome, race ending or HelloTimeout passing ends it
// too (a server that takes the connection and never answers, or a wedged
// one that may lead later).
func (a *Agent) hello(ctx, race context.Context, addr string) (_ *link, err error) {
	node := a.probe(race)
	if err := race.Err(); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if a.cfg.TLS != nil {
		creds = credentials.NewTLS(a.cfg.TLS)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(nodeconn.Codec)),
		// A server that does not answer the connection (a host down or
		// partitioned) costs at most this much of an attempt, not grpc's
		// default 20 s.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: connectTimeout}))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	l := &link{addr: addr, node: node, cc: cc, ctx: sctx, cancel: cancel}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	unrace := context.AfterFunc(race, cancel)
	// Real time, not the agent's clock: this bounds a hung peer, it is
	// not a schedule.
	timer := time.AfterFunc(a.cfg.HelloTimeout, cancel)
	if a.cfg.Token != "" {
		sctx = metadata.AppendToOutgoingContext(sctx, nodeconn.TokenMetadata, a.cfg.Token)
	}
	l.stream, err = cc.NewStream(sctx, &nodeconn.StreamDesc, nodeconn.ConnectMethod)
	if err == nil {
		err = l.stream.SendMsg(&nodeconn.AgentMsg{Hello: &nodeconn.Hello{Node: node}})
	}
	var first nodeconn.ServerMsg
	if err == nil {
		err = l.stream.RecvMsg(&first)
	}
	// Either stop returning false means its cancel ran: the stream ended.
	if stopped, raced := timer.Stop(), !unrace(); !stopped || raced {
		if err == nil {
			err = fmt.Errorf("server %s: no answer to the hello within %s", addr, a.cfg.HelloTimeout)
		}
		if raced {
			err = fmt.Errorf("server %s: another server welcomed the agent first: %w", addr, err)
		}
		return nil, err
	}
	switch {
	case err != nil:
		return nil, err
	case first.NotLeader != nil:
		return nil, fmt.Errorf("server %s does not lead (leader %q)", addr, first.NotLeader.Leader)
	case first.Welcome == nil:
		return nil, fmt.Errorf("server %s answered the hello with neither welcome nor not-leader", addr)
	}
	l.welcome = first.Welcome
	return l, nil
}

// serve runs a welcomed link: heartbeats, and the steps the leader sends,
// until the stream breaks, the leader says it no longer leads, or (with
// a leader that acknowledges heartbeats) it has sent nothing for
// silentAfter heartbeat intervals.
func (a *Agent) serve(ctx context.Context, l *link) error {
	defer l.close()
	interval := time.Duration(l.welcome.HeartbeatIntervalMs) * time.Millisecond
	if interval <= 0 {
		interval = nodeconn.DefaultHeartbeatInterval
	}
	a.mu.Lock()
	a.interval = interval
	a.mu.Unlock()
	a.setConnected(l.addr)
	defer a.setConnected("")
	began := a.cfg.Clock.Now()
	defer func() { a.sessionEnded(l.addr, a.cfg.Clock.Since(began), interval) }()
	a.log.Info("connected", "server", l.addr, "node", a.cfg.NodeID)
	for _, id := range slices.Sorted(maps.Keys(l.node.Plugins)) {
		if np := l.node.Plugins[id]; !np.Answering() {
			a.log.Warn("plugin did not answer its probe: registered as not answering, claims on it wait", "plugin", id, "endpoint", np.Endpoint, "error", np.ProbeError)
		}
	}
	sctx, cancel := context.WithCancelCause(l.ctx)
	defer context.AfterFunc(sctx, l.cancel)() // ending the session ends the stream, and so its read
	s := &session{a: a, stream: l.stream, running: map[uint64]context.CancelFunc{},
		registered: l.node, inBand: l.welcome.TakesUpdates, lastProbe: a.cfg.Clock.Now()}
	s.heard.Store(a.cfg.Clock.Now().UnixNano())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil) // before wg.Wait: stops the heartbeats and running steps
	// A leader whose host died or was cut off without closing the
	// connection (power loss, a partition: no FIN, no reset) never makes
	// a read or a write fail here for as long as TCP retransmits (about
	// 15 minutes on Linux): only its silence tells.
	var silent time.Duration
	if l.welcome.AcksHeartbeats {
		silent = silentAfter * interval
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.heartbeat(sctx, interval, silent, cancel)
	}()
	for {
		var m nodeconn.ServerMsg
		if err := l.stream.RecvMsg(&m); err != nil {
			if c := context.Cause(sctx); c != nil && !errors.Is(c, context.Canceled) {
				return c
			}
			return err
		}
		s.heard.Store(a.cfg.Clock.Now().UnixNano())
		switch {
		case m.NotLeader != nil:
			// Only the leader drives node steps: nothing more is run
			// for a server that says it no longer leads.
			return fmt.Errorf("server %s no longer leads (leader %q)", l.addr, m.NotLeader.Leader)
		case m.Step != nil:
			if sctx.Err() != nil {
				// A step gRPC had buffered before the session ended: it
				// is not run (not even its directory and journal work).
				return context.Cause(sctx)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.run(sctx, m.Step)
			}()
		case m.Cancel != nil:
			s.cancel(m.Cancel.ID)
		case m.Ack != nil:
			if err := a.journal.ack(m.Ack.Key); err != nil {
				a.log.Warn("could not drop an acknowledged step from the journal; its TTL will", "key", m.Ack.Key, "error", err)
			}
		}
	}
}

// probe asks each local plugin for its node ID and capabilities, as the
// node is registered with the servers. A plugin that fails its probe is
// in the node with its ProbeError and nothing else: a plugin restarting
// used to fail the hello, and the node went down with it, taking the
// claims of its other plugins along (host/state node_answers.go says what
// the store keeps for it).
func (a *Agent) probe(ctx context.Context) *structs.Node {
	n := &structs.Node{ID: a.cfg.NodeID, RootDir: a.cfg.RootDir, Meta: a.cfg.Meta, Agent: true,
		Plugins: map[string]*structs.NodePlugin{}}
	for _, id := range slices.Sorted(maps.Keys(a.cfg.Plugins)) {
		endpoint := a.cfg.Plugins[id]
		// Real time, not the agent's clock: this bounds a hung driver.
		pctx, cancel := context.WithTimeout(ctx, a.cfg.ProbeTimeout)
		np, err := a.csi.ProbeNode(pctx, endpoint)
		cancel()
		if err != nil {
			np = &structs.NodePlugin{Endpoint: endpoint, ProbeError: probeErrorText(err)}
		}
		np.PluginID = id
		n.Plugins[id] = np
	}
	return n
}

// probeErrorText is err as a NodePlugin's ProbeError: valid UTF-8, cut to
// structs.MaxProbeErrorLength (the store refuses longer).
func probeErrorText(err error) string {
	msg := err.Error()
	if len(msg) > structs.MaxProbeErrorLength {
		msg = msg[:structs.MaxProbeErrorLength-3] + "..."
	}
	return strings.ToValidUTF8(msg, "?")
}

// probeChange says how the plugins of now answer otherwise than in sent
// ("" if alike): one stopped or started answering its probe, or answers
// another node ID or capabilities. The text of a failure may differ from
// probe to probe and is not a change.
func probeChange(sent, now *structs.Node) string {
	for _, id := range slices.Sorted(maps.Keys(now.Plugins)) {
		was, is := sent.Plugins[id], now.Plugins[id]
		switch {
		case was == nil:
			return fmt.Sprintf("plugin %q is new", id)
		case was.Answering() && !is.Answering():
			return fmt.Sprintf("plugin %q stopped answering its probe: %s", id, is.ProbeError)
		case !was.Answering() && is.Answering():
			return fmt.Sprintf("plugin %q answers its probe again", id)
		case is.Answering() && was.Answers() != is.Answers():
			return fmt.Sprintf("plugin %q now answers %+v, registered with %+v", id, is.Answers(), was.Answers())
		}
	}
	return ""
}

// session is one live stream.
type session struct {
	a      *Agent
	stream grpc.ClientStream
	sendMu sync.Mutex

	mu      sync.Mutex
	running map[uint64]context.CancelFunc
	// heard is when the leader last sent anything (UnixNano, agent clock).
	heard atomic.Int64

	// The plugins probed again (reprobe): registered is the node as the
	// session last registered it, inBand whether the server takes a
	// later hello; probing is set while a probe runs, and only that
	// probe touches registered.
	registered *structs.Node
	inBand     bool
	lastProbe  time.Time // heartbeat's own
	probing    atomic.Bool
	probes     sync.WaitGroup
}

func (s *session) send(m *nodeconn.AgentMsg) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.SendMsg(m)
}

// heartbeat sends a heartbeat every interval until ctx ends; when silent
// is set and the leader has sent nothing for that long, it ends the
// session instead (end). It starts the plugins' probes too
// (maybeReprobe).
func (s *session) heartbeat(ctx context.Context, interval, silent time.Duration, end context.CancelCauseFunc) {
	tick := s.a.cfg.Clock.NewTicker(interval)
	defer tick.Stop()
	defer s.probes.Wait() // ctx ended: a running probe ends with it
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
			if quiet := s.a.cfg.Clock.Since(time.Unix(0, s.heard.Load())); silent > 0 && quiet > silent {
				end(fmt.Errorf("the leader sent nothing for %s, not even a heartbeat's acknowledgement (%d heartbeat intervals)", quiet, silentAfter))
				return
			}
			seq++
			if err := s.send(&nodeconn.AgentMsg{Heartbeat: &nodeconn.Heartbeat{Seq: seq}}); err != nil {
				return
			}
			s.maybeReprobe(ctx, end)
		}
	}
}

// maybeReprobe starts a probe of the node's plugins (reprobe) when
// ProbeInterval has passed since the last and none is running. The
// heartbeat loop calls it, so a probe rides the heartbeat's tick (no
// second timer) but never delays a heartbeat: a hung driver holds its
// probe for ProbeTimeout.
func (s *session) maybeReprobe(ctx context.Context, end context.CancelCauseFunc) {
	if s.a.cfg.Clock.Since(s.lastProbe) < s.a.cfg.ProbeInterval || !s.probing.CompareAndSwap(false, true) {
		return
	}
	s.lastProbe = s.a.cfg.Clock.Now()
	s.probes.Add(1)
	go func() {
		defer s.probes.Done()
		defer s.probing.Store(false)
		s.reprobe(ctx, end)
	}()
}

// reprobe probes the node's plugins and, when they answer otherwise than
// the node was last registered with (probeChange), registers it again:
// in the stream, to a server that takes updates, or else by ending the
// session, so that the reconnect's hello does.
func (s *session) reprobe(ctx context.Context, end context.CancelCauseFunc) {
	now := s.a.probe(ctx)
	if ctx.Err() != nil {
		return
	}
	change := probeChange(s.registered, now)
	switch {
	case change == "":
	case !s.inBand:
		end(fmt.Errorf("%s: reconnecting so that the hello registers the node again (the server takes no update in the stream)", change))
	default:
		s.a.log.Info("registering the node again", "change", change)
		if err := s.send(&nodeconn.AgentMsg{Hello: &nodeconn.Hello{Node: now}}); err == nil {
			s.registered = now
		} // else the stream broke: the read ends the session
	}
}

func (s *session) cancel(id uint64) {
	s.mu.Lock()
	c := s.running[id]
	s.mu.Unlock()
	if c != nil {
		c()
	}
}

// run executes one step under the leader's deadline and answers it.
func (s *session) run(ctx context.Context, req *nodeconn.StepRequest) {
	var cancel context.CancelFunc
	if req.DeadlineUnixNano > 0 {
		ctx, cancel = context.WithDeadline(ctx, time.Unix(0, req.DeadlineUnixNano))
	} else {
		ctx, cancel = context.WithTimeout(ctx, s.a.cfg.CallTimeout)
	}
	s.mu.Lock()
	s.running[req.ID] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, req.ID)
		s.mu.Unlock()
		cancel()
	}()
	err := s.a.executeKeyed(ctx, req)
	res := &nodeconn.StepResult{ID: req.ID}
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			st = status.FromContextError(err)
		}
		res.Code, res.Message = uint32(st.Code()), st.Message()
	}
	if err := s.send(&nodeconn.AgentMsg{Result: res}); err != nil {
		s.a.log.Warn("could not answer a step; the leader retries it", "method", req.Method, "error", err)
	}
}

// executeKeyed runs a step through the journal when the leader keyed it
// (a release step): a retry of a step that already succeeded here is
// answered from the journal, without calling the driver again, unless a
// step on the same path ran since (journal.go). A journal that cannot be
// written refuses the step rather than run it unrecorded.
func (a *Agent) executeKeyed(ctx context.Context, req *nodeconn.StepRequest) error {
	if !a.sockets[req.Endpoint] {
		return status.Errorf(codes.InvalidArgument, "endpoint %q is not a plugin socket of node %q", req.Endpoint, a.cfg.NodeID)
	}
	m, path, err := decodeStep(req)
	if err != nil {
		return err
	}
	if req.Key == "" {
		// Not journaled, but it may undo what journaled answers say.
		if err := a.journal.supersede(path); err != nil {
			return status.Errorf(codes.Internal, "%s not run: %v", req.Method, err)
		}
		return a.execute(ctx, req, m)
	}
	prev, err := a.journal.begin(req.Key, req.Method, path)
	switch {
	case errors.Is(err, errStepInFlight):
		// CSI spec: ABORTED, an operation is pending for the volume.
		return status.Errorf(codes.Aborted, "%s %s: %v", req.Method, req.Key, err)
	case err != nil:
		return status.Errorf(codes.Internal, "%s %s not run: %v", req.Method, req.Key, err)
	case prev != nil && prev.State == entryDone:
		a.log.Info("node step already done here: answered from the step journal, the driver is not called again",
			"method", req.Method, "key", req.Key, "done", prev.Done)
		return nil
	case prev != nil:
		a.log.Warn("node step was started by an earlier run of the agent that stopped before the driver answered: "+
			"it may or may not have run, so it is called again (node steps are idempotent, CSI spec)",
			"method", req.Method, "key", req.Key, "started", prev.Started)
	}
	err = a.execute(ctx, req, m)
	if jerr := a.journal.finish(req.Key, req.Method, err == nil); jerr != nil {
		// The answer is still the driver's: only a replay of it is lost,
		// which costs one more idempotent call.
		a.log.Warn("could not journal a node step's answer", "method", req.Method, "key", req.Key, "error", jerr)
	}
	return err
}

// decodeStep decodes a step's CSI request, and names the path whose state
// it changes: the staging path of a stage or unstage, the target path of
// a publish or unpublish.
func decodeStep(req *nodeconn.StepRequest) (proto.Message, string, error) {
	var m proto.Message
	var path func() string
	switch req.Method {
	case nodeconn.MethodStage:
		r := &csipb.NodeStageVolumeRequest{}
		m, path = r, r.GetStagingTargetPath
	case nodeconn.MethodPublish:
		r := &csipb.NodePublishVolumeRequest{}
		m, path = r, r.GetTargetPath
	case nodeconn.MethodUnpublish:
		r := &csipb.NodeUnpublishVolumeRequest{}
		m, path = r, r.GetTargetPath
	case nodeconn.MethodUnstage:
		r := &csipb.NodeUnstageVolumeRequest{}
		m, path = r, r.GetStagingTargetPath
	default:
		return nil, "", status.Errorf(codes.Unimplemented, "unknown node step %q", req.Method)
	}
	if err := proto.Unmarshal(req.Request, m); err != nil {
		return nil, "", status.Errorf(codes.InvalidArgument, "decode %s: %v", req.Method, err)
	}
	if path() == "" {
		return nil, "", status.Errorf(codes.InvalidArgument, "%s names no path", req.Method)
	}
	return m, path(), nil
}

// execute runs one decoded node step against a local socket.
func (a *Agent) execute(ctx context.Context, req *nodeconn.StepRequest, m proto.Message) error {
	a.log.Debug("node step", "method", req.Method, "endpoint", req.Endpoint, "id", req.ID)
	switch m := m.(type) {
	case *csipb.NodeStageVolumeRequest:
		return a.steps.NodeStageVolume(ctx, req.Endpoint, m)
	case *csipb.NodePublishVolumeRequest:
		return a.steps.NodePublishVolume(ctx, req.Endpoint, m)
	case *csipb.NodeUnpublishVolumeRequest:
		return a.steps.NodeUnpublishVolume(ctx, req.Endpoint, m)
	case *csipb.NodeUnstageVolumeRequest:
		return a.steps.NodeUnstageVolume(ctx, req.Endpoint, m)
	}
	return status.Errorf(codes.Unimplemented, "unknown node step %q", req.Method)
}
