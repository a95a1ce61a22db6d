package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/structs"
)

// Headers of the multi-server API.
const (
	// KnownLeaderHeader says whether the server that answered a read knew
	// a leader ("true"/"false").
	KnownLeaderHeader = "X-Volhost-Known-Leader"
	// LastContactHeader is how stale a read may be: milliseconds since
	// the answering server last heard from the leader (0 on the leader,
	// -1 when it never has).
	LastContactHeader = "X-Volhost-Last-Contact"
	// ForwardedHeader marks a request a follower forwarded to the leader;
	// its value is the follower's raft ID. A forwarded request is never
	// forwarded again, so two servers that disagree about the leader
	// cannot bounce a request between them.
	ForwardedHeader = "X-Volhost-Forwarded-By"
	// forwardDialTimeout bounds reaching the leader: a dead leader means
	// a fast 503, never a hang.
	forwardDialTimeout = 2 * time.Second
)

// ClusterOperator is what the API needs from the replicated log to forward
// requests and serve the operator routes. *cluster.Cluster implements it.
type ClusterOperator interface {
	NodeID() string
	ID() string
	IsLeader() bool
	KnownLeader() bool
	LastContact() time.Duration
	LeaderHTTPAddr() (string, error)
	Peers() ([]cluster.Peer, error)
	Join(ctx context.Context, req cluster.JoinRequest) (cluster.JoinResponse, error)
	RemovePeer(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) error
	SaveSnapshot(ctx context.Context, w io.Writer) error
	RestoreSnapshot(ctx context.Context, r io.Reader, o cluster.RestoreOptions) error
	// RotateKey adds a new active keyring key; Keyring lists the keys
	// (never their material).
	RotateKey(ctx context.Context) (cluster.KeyInfo, error)
	Keyring() []cluster.KeyInfo
}

// forwarder holds the cluster view once EnableCluster set it; nil keeps
// the single-server behaviour (everything served locally).
type forwarder struct {
	op        ClusterOperator
	transport http.RoundTripper
}

// EnableCluster makes this API a member of a multi-server cluster: writes
// reaching a follower are forwarded to the leader, reads too unless
// ?stale=true, every read answer carries KnownLeaderHeader and
// LastContactHeader, and the operator routes are served (operator.go).
// Call it before the server starts serving.
func (s *Server) EnableCluster(op ClusterOperator) {
	s.fwd.op = op
	s.fwd.transport = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: forwardDialTimeout}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     s.cfg.ForwardTLS,
	}
	s.operatorRoutes()
}

// servedLocally lists the routes every server answers itself, whoever
// leads: its own view of leadership and peers, its metrics and its modules.
func servedLocally(r *http.Request) bool {
	p := r.URL.Path
	// Modules are loaded from each server's own directory; the UI's
	// assets are in every binary (its data calls are forwarded as usual).
	return strings.HasPrefix(p, "/v1/status/") || p == "/v1/metrics" ||
		strings.HasPrefix(p, "/v1/module") || strings.HasPrefix(p, "/ui/")
}

// forwarding sends a request to the leader when this server should not
// answer it: a write on a follower, or a read on a follower without
// ?stale=true (the default read is the leader's view).
func (s *Server) forwarding(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := s.fwd.op
		if op == nil || servedLocally(r) {
			next.ServeHTTP(w, r)
			return
		}
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		if read {
			stale, err := queryBool(r, "stale")
			if err != nil {
				WriteError(w, err)
				return
			}
			if stale || op.IsLeader() {
				if !stale {
					if err := waitReadsCurrent(r.Context(), op); err != nil {
						WriteError(w, err)
						return
					}
				}
				setStaleness(w, op)
				next.ServeHTTP(w, r)
				return
			}
		} else if op.IsLeader() {
			next.ServeHTTP(w, r)
			return
		}
		// A fresh bootstrap_expect seed knows no leader yet and collects
		// join requests itself.
		if r.URL.Path == joinPath && !op.KnownLeader() {
			next.ServeHTTP(w, r)
			return
		}
		if by := r.Header.Get(ForwardedHeader); by != "" {
			WriteError(w, fmt.Errorf("%w: request forwarded by %s reached %s, which does not lead (leadership is changing; retry)",
				structs.ErrNoLeader, by, op.NodeID()))
			return
		}
		addr, err := op.LeaderHTTPAddr()
		if err != nil {
			WriteError(w, err)
			return
		}
		s.proxy(w, r, addr)
	})
}

// setStaleness sets the headers that say how current a local read is.
func setStaleness(w http.ResponseWriter, op ClusterOperator) {
	w.Header().Set(KnownLeaderHeader, strconv.FormatBool(op.KnownLeader()))
	lc := op.LastContact()
	ms := int64(-1)
	if lc >= 0 {
		ms = lc.Milliseconds()
	}
	w.Header().Set(LastContactHeader, strconv.FormatInt(ms, 10))
}

// proxy forwards r to the leader's API at addr. The leader's answer
// (status, headers, body, streamed) goes back unchanged; failing to reach
// it is 503 "no cluster leader".
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, addr string) {
	if s.cfg.ForwardTLS != nil && !strings.Contains(addr, "://") {
		addr = "https://" + addr
	}
	target, err := leaderURL(addr)
	if err != nil {
		WriteError(w, fmt.Errorf("%w: leader address %q: %v", structs.ErrNoLeader, addr, err))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Set(ForwardedHeader, s.fwd.op.NodeID())
			s.vouchServer(pr.In, pr.Out) // auth.go
			// This server checked the Origin against its own Host (guard);
			// the leader would compare it with its own and refuse.
			pr.Out.Header.Del("Origin")
		},
		Transport:     s.fwd.transport,
		FlushInterval: -1, // stream blocking answers and snapshots as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the caller went away
			}
			WriteError(w, fmt.Errorf("%w: forwarding to the leader at %s: %v", structs.ErrNoLeader, addr, err))
		},
	}
	s.log.Debug("forwarding to the leader", "method", r.Method, "path", r.URL.Path, "leader", addr)
	rp.ServeHTTP(w, r)
}

// leaderURL turns a member's HTTP address ("host:port" or a URL) into the
// base URL to forward to.
func leaderURL(addr string) (*url.URL, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}

// readReadiness is implemented by a cluster whose new leader may not have
// applied its committed log yet (host/cluster ReadyForReads).
type readReadiness interface{ ReadyForReads() bool }

// readsCurrentWait bounds how long a leader's read waits for its step-up
// barrier.
const readsCurrentWait = 5 * time.Second

// waitReadsCurrent holds a leader's read (not ?stale) until the leader
// applied every entry committed before its term: a leader just elected, or
// just restarted, answered reads from a store that lacked writes it had
// acknowledged before. It waits (the barrier takes one round of the log),
// then answers 503 if the leader is still not current.
func waitReadsCurrent(ctx context.Context, op ClusterOperator) error {
	rr, ok := op.(readReadiness)
	if !ok || rr.ReadyForReads() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readsCurrentWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: this server was just elected and has not applied its log yet; retry, or read with ?stale=true", structs.ErrNoLeader)
		case <-tick.C:
			if rr.ReadyForReads() {
				return nil
			}
			if !op.IsLeader() {
				return fmt.Errorf("%w: this server lost its leadership while applying its log; retry", structs.ErrNoLeader)
			}
		}
	}
}
