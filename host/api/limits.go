package api

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
)

// Defaults of the resource limits (Config).
const (
	DefaultMaxConnsPerClient  = 200
	DefaultMaxBlockingQueries = 1024
	DefaultReadTimeout        = 30 * time.Second
	DefaultWriteTimeout       = 30 * time.Second
	DefaultIdleTimeout        = 90 * time.Second
	DefaultSnapshotTimeout    = 30 * time.Minute
	DefaultMaxPerPage         = 1000
	// fdReserve is left of the open-file limit for everything but API
	// connections: raft, boltdb, snapshots, CSI sockets, module files.
	fdReserve = 512
	// warnEvery spaces the WARN lines of a connection flood.
	warnEvery = 10 * time.Second
)

func (c *Config) applyLimitDefaults() {
	if c.MaxConns <= 0 {
		c.MaxConns = defaultMaxConns()
	}
	if c.MaxConnsPerClient <= 0 {
		c.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	if c.MaxBlockingQueries <= 0 {
		c.MaxBlockingQueries = DefaultMaxBlockingQueries
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.SnapshotTimeout <= 0 {
		c.SnapshotTimeout = DefaultSnapshotTimeout
	}
	if c.MaxPerPage <= 0 {
		c.MaxPerPage = DefaultMaxPerPage
	}
}

// defaultMaxConns keeps API connections from using up the process's file
// descriptors (19,990 idle connections once starved everything else).
func defaultMaxConns() int {
	n := openFileLimit()
	if n <= 0 {
		return 4096
	}
	return max(64, n-fdReserve)
}

// limitListener caps open connections per client IP and in total. Unlike
// netutil.LimitListener it never blocks Accept (a blocked Accept leaves new
// clients hanging in the kernel backlog, the symptom this fixes): a client
// over its own cap is closed at once, and at the total cap an idle
// connection is closed to make room, so a flood of idle connections cannot
// lock out a health check.
type limitListener struct {
	net.Listener
	maxTotal, maxPer int
	evict            func() bool // closes one idle connection, if any
	log              hclog.Logger

	mu       sync.Mutex
	total    int
	per      map[string]int
	refused  int
	evicted  int
	lastWarn time.Time
}

func (s *Server) limitListener(l net.Listener) net.Listener {
	return &limitListener{Listener: l, maxTotal: s.cfg.MaxConns, maxPer: s.cfg.MaxConnsPerClient,
		evict: s.conns.evictIdle, log: s.log, per: map[string]int{}}
}

func clientIP(a net.Addr) string {
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// Accept implements net.Listener.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := clientIP(c.RemoteAddr())
		if l.admit(ip) {
			return &limitConn{Conn: c, l: l, ip: ip}, nil
		}
		_ = c.Close()
	}
}

// admit takes a slot for ip, evicting an idle connection at the total cap.
func (l *limitListener) admit(ip string) bool {
	l.mu.Lock()
	if l.per[ip] >= l.maxPer {
		l.refused++
		l.warnLocked(ip, "refusing a connection: client connection limit reached", l.maxPer)
		l.mu.Unlock()
		return false
	}
	full := l.total >= l.maxTotal
	l.mu.Unlock()
	// evict closes a connection, whose release takes l.mu: call it unlocked.
	if full && l.evict() {
		l.mu.Lock()
		l.evicted++
		l.warnLocked(ip, "connection limit reached, closed an idle connection", l.maxTotal)
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.maxTotal {
		l.refused++
		l.warnLocked(ip, "refusing a connection: connection limit reached", l.maxTotal)
		return false
	}
	l.total++
	l.per[ip]++
	return true
}

func (l *limitListener) warnLocked(ip, msg string, limit int) {
	now := time.Now()
	if now.Sub(l.lastWarn) < warnEvery {
		return
	}
	l.lastWarn = now
	l.log.Warn(msg, "client", ip, "limit", limit,
		"open", l.total, "refused_so_far", l.refused, "idle_evicted_so_far", l.evicted)
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.per[ip]--; l.per[ip] <= 0 {
		delete(l.per, ip)
	}
}

type limitConn struct {
	net.Conn
	l    *limitListener
	ip   string
	once sync.Once
}

// Close releases the slot once, however often it is called.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// evictIdle closes one connection that is idle between requests or has
// not sent one yet.
func (c *connStates) evictIdle() bool {
	c.mu.Lock()
	var victim net.Conn
	for conn, st := range c.m {
		if st == http.StateIdle {
			victim = conn
			break
		}
		if st == http.StateNew && victim == nil {
			victim = conn
		}
	}
	if victim != nil {
		delete(c.m, victim)
	}
	c.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close()
	return true
}

// errTooManyBlocking answers a blocking read past MaxBlockingQueries.
var errTooManyBlocking = errors.New("too many blocking queries in flight; retry later")

// acquireBlocking takes a blocking-query slot, or answers 429.
func (s *Server) acquireBlocking(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case s.blocking <- struct{}{}:
		return func() { <-s.blocking }, true
	default:
		w.Header().Set("Retry-After", "1")
		WriteError(w, &httpError{status: http.StatusTooManyRequests,
			msg: errTooManyBlocking.Error() + " (limit " + strconv.Itoa(cap(s.blocking)) + ")"})
		return nil, false
	}
}

// ModuleLoadTime is what a write that loads modules may take beyond
// WriteTimeout: a reload compiles every changed module, and a 3 MB Go
// guest takes seconds to compile (tens of seconds cold on a loaded
// machine). Under WriteTimeout alone the connection's deadline passed
// mid-reload and the caller got EOF instead of the reload's answer, while
// the reload itself went on and took effect.
const ModuleLoadTime = 5 * time.Minute

// loadsModules reports the writes that compile modules: reload, shadow,
// promote and rollback.
func loadsModules(r *http.Request) bool {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		return false
	}
	p := r.URL.Path
	if p == "/v1/modules/reload" {
		return true
	}
	rest, ok := strings.CutPrefix(p, "/v1/module/")
	if !ok {
		return false
	}
	for _, action := range []string{"/shadow", "/promote", "/rollback"} {
		if strings.HasSuffix(rest, action) {
			return true
		}
	}
	return false
}

// setDeadlines gives each request its own write deadline (and the
// snapshot upload a longer read deadline): a non-blocking answer must be
// written within WriteTimeout, a blocking one within its wait plus that,
// one that loads modules within ModuleLoadTime plus that.
func (s *Server) setDeadlines(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	d := s.cfg.WriteTimeout
	if loadsModules(r) {
		d += ModuleLoadTime
	} else if _, ok := rawBodyRoutes[r.URL.Path]; ok {
		d = s.cfg.SnapshotTimeout
		_ = rc.SetReadDeadline(time.Now().Add(d))
	} else if r.Method == http.MethodGet && r.URL.Query().Get("index") != "" {
		_, wait, err := blockingParams(r)
		if err == nil {
			d += wait
		}
	}
	// An error means the writer cannot take deadlines (httptest recorders):
	// nothing to bound then.
	_ = rc.SetWriteDeadline(time.Now().Add(d))
}
