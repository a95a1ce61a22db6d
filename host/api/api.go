// Package api owns volhost's HTTP/JSON API (/v1/...): routing, request
// decoding and limits, blocking queries over the state store, and the
// mapping of typed errors onto HTTP statuses. Writes and operations go
// through a Backend (host/server); reads come straight from state snapshots.
//
// Volumes are addressed as /v1/volume/ID with the namespace in the
// ?namespace= query parameter ("default" when omitted), the same scheme on
// every volume route, so an ID never has to be told apart from a namespace
// by its position in the path.
//
// Routes (JSON in and out; PUT and POST are the same on writes):
//
//	GET    /v1/volumes                  ?namespace= ?plugin_id= ?claim_state= ?stuck= ?search=
//	PUT    /v1/volumes                  {"volumes": [...]}            -> {"index"}
//	GET    /v1/volume/ID                ?namespace=                   -> volume + force_deregister check
//	DELETE /v1/volume/ID                ?namespace= ?force=true       -> {"leftovers", "index"}
//	PUT    /v1/volume/ID/claim          ?namespace= ClaimRequest      -> Claim
//	PUT    /v1/volume/ID/detach         ?namespace= ?node=N           -> DetachResult
//	GET    /v1/volumes/leftovers
//	DELETE /v1/volumes/leftovers        {"ids": [...]} | {"all": true} | ?id=..&id=.. | ?all=true
//	GET    /v1/nodes, /v1/node/ID;      PUT /v1/nodes {"node": {...}}; PUT /v1/node/ID/status {"status"}
//	DELETE /v1/node/ID                  ?force=true                   -> {"skipped_node_steps", "index"}
//	GET    /v1/plugins, /v1/plugin/ID;  PUT /v1/plugins {"plugin": {...}}
//	DELETE /v1/plugin/ID                -> {"index"}; 409 while volumes use it
//	GET    /v1/allocs (?node_id=, ?namespace=), /v1/alloc/ID (?namespace=); PUT /v1/allocs {"allocs": [...]}
//	GET    /v1/events                   ?index=N: only events after N (and blocks until there are some)
//	PUT    /v1/system/gc                -> {"volumes"}
//	GET    /v1/status/leader            -> {"address", "is_leader"}; 503 while no leader is known
//	GET    /v1/metrics                  Prometheus text format
//	GET    /ui/                         the web UI (host/ui; ui.go has its read routes)
//
// With EnableACL every route needs the capability routeRules
// declares for it (auth.go) and the /v1/acl routes are served (acl.go);
// a denial is 403 "Permission denied: missing capability ...".
//
// Every read is a blocking query: ?index=N&wait=D answers once the data
// reflects an index above N, or after D (default 5m, capped at 10m); the
// X-Volhost-Index header carries the index to pass back. Errors are
// {"error", "field", "code"} with the status StatusFor gives.
package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
)

// Defaults for Config.
const (
	DefaultAddr         = "127.0.0.1:4747"
	DefaultMaxBodyBytes = 1 << 20
	// DefaultWait is how long a blocking query waits when ?wait= is not
	// given, and MaxWait caps it (Nomad's values).
	DefaultWait = 5 * time.Minute
	MaxWait     = 10 * time.Minute
	// DefaultNamespace is used when a volume request names none.
	DefaultNamespace = "default"
	// IndexHeader carries the index a read reflects; pass it back as
	// ?index= to block until something newer exists.
	IndexHeader = "X-Volhost-Index"
)

// Config configures a Server. Zero values take the defaults.
type Config struct {
	// Addr is the listen address for Start (default 127.0.0.1:4747).
	Addr string
	// MaxBodyBytes limits request bodies (default 1 MiB); larger bodies get 413.
	MaxBodyBytes int64
	// Logger is the parent logger; the server logs as "api" under it.
	Logger hclog.Logger
	// TLS serves HTTPS with this config (tlsutil.Holder.HTTPServerConfig).
	TLS *tls.Config
	// ForwardTLS is how a follower dials the leader's HTTPS API
	// (tlsutil.Holder.ClientConfig); set with TLS.
	ForwardTLS *tls.Config

	// AllowedHosts are the host names (besides IP literals and localhost)
	// a request's Host may name; "*" turns the DNS rebinding guard off.
	AllowedHosts []string
	// MaxConns caps open connections in total (default: the open-file
	// limit minus a reserve for raft, CSI and modules) and
	// MaxConnsPerClient per client IP (default 200). At the total cap an
	// idle connection is closed to make room; past a client's cap its new
	// connections are closed at once. Both are logged at WARN.
	MaxConns          int
	MaxConnsPerClient int
	// MaxBlockingQueries caps blocking queries in flight (default 1024);
	// past it a blocking read gets 429.
	MaxBlockingQueries int
	// ReadTimeout bounds reading a request (headers and body; default
	// 30s, the snapshot upload gets SnapshotTimeout), WriteTimeout writing
	// the answer of a non-blocking request (default 30s; a blocking one
	// gets its wait on top), IdleTimeout an idle keep-alive connection
	// (default 90s).
	ReadTimeout     time.Duration
	WriteTimeout    time.Duration
	IdleTimeout     time.Duration
	SnapshotTimeout time.Duration
	// MaxPerPage caps ?per_page= on lists and is the page size when none is
	// asked for (default 1000).
	MaxPerPage int
	// ProbeErrorDetail says whether the caller may see why an endpoint
	// probe failed (the dial error maps the agent host's files and ports).
	// nil: nobody; the ACL work sets it to "has operator:write".
	ProbeErrorDetail func(r *http.Request) bool
	// Audit commits the audit events of privileged actions (force
	// deregister, detach, fence, ...) whether ACLs are on or off: with
	// them off the accessor is "anonymous", and the trail still says who
	// did what when. nil: ACLConfig.Audit, else only the log line.
	Audit AuditLog
	// SpoolDir holds an operator snapshot save while it is written, before
	// it is sent (default: the system's temporary directory); the agent
	// sets its data dir, as the save is the size of the raft snapshot.
	SpoolDir string
}

// Server serves the API.
type Server struct {
	cfg     Config
	log     hclog.Logger
	store   Store
	backend Backend
	metrics http.Handler
	mux     *routeMux
	handler http.Handler
	auth    authorizer // ACL enforcement (auth.go); zero: ACL disabled
	fwd     forwarder  // multi-server forwarding (forward.go); zero: serve everything locally

	// base is the parent of every request context; Shutdown cancels it so
	// blocking queries end instead of holding the shutdown for minutes.
	base       context.Context
	cancelBase context.CancelFunc

	mu   sync.Mutex
	srv  *http.Server
	addr string
	done chan struct{}

	conns connStates // what each open connection is doing, for Shutdown

	hosts    map[string]bool // AllowedHosts, lower case
	blocking chan struct{}   // one slot per blocking query in flight
	saving   chan struct{}   // one slot: the operator snapshot save in flight (operator.go)

	stuckSamples stuckSampler  // the stuck-over-time series of GET /v1/stats (ui.go)
	releases     releaseWindow // the release series of GET /v1/stats, folded once (release_window.go)
}

// connStates tracks the state of every open connection (http.Server's
// ConnState hook), so Shutdown can tell requests still running from
// connections that never sent one.
type connStates struct {
	mu sync.Mutex
	m  map[net.Conn]http.ConnState
}

func (c *connStates) track(conn net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[net.Conn]http.ConnState)
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(c.m, conn)
	default:
		c.m[conn] = st
	}
}

// active counts connections with a request in progress.
func (c *connStates) active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, st := range c.m {
		if st == http.StateActive {
			n++
		}
	}
	return n
}

// New returns a Server reading from store, writing through backend and
// serving metrics (may be nil) at /v1/metrics. NewServer is the same over a
// *state.Store.
func New(cfg Config, store Store, backend Backend, metrics http.Handler) *Server {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.applyLimitDefaults()
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger.Named("api"),
		store:   store,
		backend: backend,
		metrics: metrics,
		mux:     &routeMux{ServeMux: http.NewServeMux()},
		done:    make(chan struct{}),
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.hosts = map[string]bool{}
	for _, h := range cfg.AllowedHosts {
		s.hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	s.blocking = make(chan struct{}, cfg.MaxBlockingQueries)
	s.saving = make(chan struct{}, 1)
	s.routes()
	s.uiRoutes()
	// Authorization runs where a request is served: a follower forwards
	// without judging (its copy of the tokens may lag) and the leader
	// checks; reads a follower serves itself (?stale=true, its own
	// modules) are checked there.
	s.handler = s.guard(s.forwarding(s.authorizing(s.wrap(s.mux.ServeMux))))
	return s
}

// Handler returns the API's http.Handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// Handle registers an extra route on the API, e.g. the module commands
// (/v1/modules, /v1/module/{name}, /v1/modules/reload). Use
// WriteJSON and WriteError so answers look like every other route. It must
// be called before the server starts serving.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Start listens on cfg.Addr and serves in the background until ctx ends or
// Shutdown is called. It returns once the listener is open, so Addr is valid.
func (s *Server) Start(ctx context.Context) error {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listen on %s: %w", s.cfg.Addr, err)
	}
	l = s.limitListener(l)
	if s.cfg.TLS != nil {
		l = tls.NewListener(l, s.cfg.TLS)
	}
	srv := s.newHTTPServer(l)
	if srv == nil {
		_ = l.Close()
		return errors.New("api: server already started")
	}
	go s.runStuckSampler()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve failed", "addr", l.Addr().String(), "error", err)
		}
	}()
	// The server's owner is ctx (or an explicit Shutdown): this goroutine
	// ends with whichever comes first.
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Shutdown(sctx)
		case <-s.done:
		}
	}()
	s.log.Info("listening", "addr", l.Addr().String())
	return nil
}

// Serve serves on l until Shutdown; it returns nil after a clean shutdown.
func (s *Server) Serve(l net.Listener) error {
	l = s.limitListener(l)
	srv := s.newHTTPServer(l)
	if srv == nil {
		return errors.New("api: server already started")
	}
	go s.runStuckSampler() // ends with s.base (Shutdown)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("api: serve: %w", err)
	}
	return nil
}

func (s *Server) newHTTPServer(l net.Listener) *http.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	s.addr = l.Addr().String()
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// ReadTimeout covers the body too; the snapshot upload extends its
		// own deadline. WriteTimeout stays 0 here because blocking queries
		// legitimately answer after minutes: guard sets each request's
		// write deadline from its wait instead (limits.go).
		ReadTimeout: s.cfg.ReadTimeout,
		IdleTimeout: s.cfg.IdleTimeout,
		BaseContext: func(net.Listener) context.Context { return s.base },
		ConnState:   s.conns.track,
		ErrorLog:    s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	return s.srv
}

// Shutdown stops accepting requests and waits for in-flight ones (blocking
// queries end when their request context is cancelled) until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.mu.Unlock()
	s.cancelBase()
	if srv == nil {
		return nil
	}
	// srv.Shutdown waits for every connection to be idle, and net/http
	// counts a connection that has not sent a request yet as busy for its
	// first 5 s. A client's transport leaves such connections behind when it
	// dials one and then reuses another that became idle, which made a
	// shutdown take 5 s and use up the deadline its caller shares with the
	// module runtime. So once no request is running, close the rest.
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	tick := time.NewTicker(shutdownPoll)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				return nil
			}
			busy := s.conns.active()
			closeErr := srv.Close()
			if busy == 0 {
				return closeErr
			}
			return fmt.Errorf("api: shutdown: %d requests still running: %w", busy, err)
		case <-tick.C:
			if s.conns.active() == 0 {
				closeErr := srv.Close()
				<-done // returns now that every connection is closed
				return closeErr
			}
		}
	}
}

// shutdownPoll is how often Shutdown checks whether requests still run.
const shutdownPoll = 20 * time.Millisecond

// Addr is the address the server listens on ("" before Start or Serve).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}
