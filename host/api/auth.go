package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// Token headers. X-Volhost-Token wins over Authorization.
const (
	TokenHeader = "X-Volhost-Token"
	// TokenEnv names the environment variable the CLI reads the token from.
	TokenEnv = "VOLHOST_TOKEN"
)

// Resolver turns a request's secret into an identity. *acl.Service
// implements it (with ACLService for the /v1/acl routes).
type Resolver interface {
	Resolve(secret string) (*acl.Identity, error)
}

// AuditLog commits audit events (structs.EventAppendType) through the
// replicated log. *cluster.Cluster implements it.
type AuditLog interface {
	Apply(ctx context.Context, t structs.MessageType, req any) (uint64, any, error)
}

// ACLConfig turns ACL enforcement on (EnableACL).
type ACLConfig struct {
	Service ACLService
	Audit   AuditLog
	// ServerIdentity reports whether a TLS connection presented a verified
	// server certificate (server.<region>.volhost): such a caller may join
	// the cluster without a management token. Nil: only a token may.
	ServerIdentity func(*tls.ConnectionState) bool
}

// authorizer is the ACL state of a Server.
type authorizer struct {
	cfg *ACLConfig
}

// EnableACL turns on authorization of every route (see routeRules) and
// adds the /v1/acl routes. Call it before the server starts serving.
func (s *Server) EnableACL(cfg ACLConfig) {
	s.auth.cfg = &cfg
	s.aclRoutes()
}

// routeMux records the patterns registered on it, so a test can check
// that every route declares its capability.
type routeMux struct {
	*http.ServeMux
	mu       sync.Mutex
	patterns []string
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.mu.Lock()
	m.patterns = append(m.patterns, pattern)
	m.mu.Unlock()
	// Every route refuses the query parameters it does not take (params.go).
	m.ServeMux.Handle(pattern, checkingParams(pattern, h))
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Patterns lists the registered route patterns.
func (s *Server) Patterns() []string {
	s.mux.mu.Lock()
	defer s.mux.mu.Unlock()
	return slices.Clone(s.mux.patterns)
}

// nsFrom says where a namespaced route's namespace comes from.
type nsFrom int

const (
	nsQuery       nsFrom = iota // ?namespace=, "default" when omitted
	nsQueryOrAll                // ?namespace=, every namespace when omitted (lists)
	nsClaimBody                 // ?namespace=, else the claim body's, else "default"
	nsVolumesBody               // every volume's namespace in the register body
	nsAllocsBody                // every allocation's namespace in the upsert body, and the one each is stored in
	nsAllocPath                 // ?namespace=, else the namespace of the allocation {id} is stored in (allocNamespaceOf)
)

// nodeFrom says where a node route finds the one node it is about, so a
// token scoped to nodes (acl node_id rules) is checked against it.
type nodeFrom int

const (
	nodeNone nodeFrom = iota // about no one node: the node block decides
	nodePath                 // the {id} path segment
	nodeBody                 // the node registration body's node.id
)

// rule is what a route needs.
type rule struct {
	cap  acl.Capability
	ns   nsFrom
	node nodeFrom
	// force: DELETE /v1/volume/ID?force=true needs force-deregister.
	force bool
	// open routes need nothing: the health check, the one-time bootstrap
	// (the store refuses a second one), the empty-ID 400s.
	open bool
	// self: any valid token, or anonymous (GET /v1/acl/token/self).
	self bool
	// join: a management token or a verified server certificate.
	join bool
	// audit names the action of the audit event a success records.
	audit string
	// and is a second rule the request must pass as well (both).
	and *rule
}

func need(c acl.Capability) rule                 { return rule{cap: c} }
func needNode(c acl.Capability, f nodeFrom) rule { return rule{cap: c, node: f} }
func needNS(c acl.Capability, f nsFrom) rule     { return rule{cap: c, ns: f} }
func audited(r rule, action string) rule         { r.audit = action; return r }
func both(r, and rule) rule                      { r.and = &and; return r }

// routeRules declares the capability of every route, by the exact pattern
// it is registered with. A route missing here is denied while ACLs are on
// (fail closed), and TestEveryRouteDeclaresACapability catches it.
var routeRules = map[string]rule{
	"GET /v1/volumes":              needNS(acl.NamespaceRead, nsQueryOrAll),
	"PUT /v1/volumes":              needNS(acl.NamespaceRegister, nsVolumesBody),
	"POST /v1/volumes":             needNS(acl.NamespaceRegister, nsVolumesBody),
	"GET /v1/volumes/leftovers":    need(acl.OperatorRead),
	"DELETE /v1/volumes/leftovers": audited(need(acl.OperatorWrite), "leftovers-clear"),
	"GET /v1/volume/{id}":          needNS(acl.NamespaceRead, nsQuery),
	"DELETE /v1/volume/{id}":       {cap: acl.NamespaceDeregister, ns: nsQuery, force: true},
	"PUT /v1/volume/{id}/claim":    needNS(acl.NamespaceClaim, nsClaimBody),
	"POST /v1/volume/{id}/claim":   needNS(acl.NamespaceClaim, nsClaimBody),
	"PUT /v1/volume/{id}/detach":   audited(needNS(acl.NamespaceDetach, nsQuery), "detach"),
	"POST /v1/volume/{id}/detach":  audited(needNS(acl.NamespaceDetach, nsQuery), "detach"),

	"GET /v1/nodes": need(acl.NodeRead),
	// A node agent's token may be scoped to its own node (node_id rules):
	// these routes are about one node and are checked against it. A
	// registration decides where the node's steps, with volume secrets,
	// are sent: audited, like a plugin's controller endpoint below.
	"PUT /v1/nodes":     audited(needNode(acl.NodeWrite, nodeBody), "node-register"),
	"POST /v1/nodes":    audited(needNode(acl.NodeWrite, nodeBody), "node-register"),
	"GET /v1/node/{id}": needNode(acl.NodeRead, nodePath),
	// A status set here is an operator's word, not a timeout (the store
	// clears HeartbeatLost): "down" lets the default policy skip the
	// node steps of its claims, as a fence does, so it needs what a
	// fence needs, operator:write, besides node:write. Never a node
	// agent's (node_id rules do not grant it): its agent reports
	// liveness by heartbeats on its stream. With node:write alone a
	// scheduler integration's token scoped to dev marked a node running
	// prod down.
	"PUT /v1/node/{id}/status":  audited(both(need(acl.NodeWrite), need(acl.OperatorWrite)), "node-status"),
	"POST /v1/node/{id}/status": audited(both(need(acl.NodeWrite), need(acl.OperatorWrite)), "node-status"),
	// A fence lets claims skip their node steps (a forced detach): an
	// operator's attestation, never a node agent's.
	"PUT /v1/node/{id}/fence":    audited(need(acl.OperatorWrite), "node-fence"),
	"DELETE /v1/node/{id}/fence": audited(need(acl.OperatorWrite), "node-unfence"),
	// Removing a node or a plugin is an operator's decision, never a
	// node agent's (a forced node deregister skips node steps, as a
	// fence does).
	"DELETE /v1/node/{id}":   audited(need(acl.OperatorWrite), "node-deregister"),
	"DELETE /v1/plugin/{id}": audited(need(acl.OperatorWrite), "plugin-deregister"),
	"GET /v1/plugins":        need(acl.NodeRead),
	// A plugin's controller endpoint is where the leader sends
	// ControllerPublish and ControllerUnpublish, with the secrets of
	// every volume of the plugin, in every namespace: an operator's
	// decision, as a direct node's endpoints are (structs.Node.OperatorFields).
	// With node:write alone a scheduler integration's token, scoped to
	// its namespaces, repointed a plugin and received every namespace's
	// secrets.
	"PUT /v1/plugins":     audited(both(need(acl.NodeWrite), need(acl.OperatorWrite)), "plugin-register"),
	"POST /v1/plugins":    audited(both(need(acl.NodeWrite), need(acl.OperatorWrite)), "plugin-register"),
	"GET /v1/plugin/{id}": need(acl.NodeRead),
	// An allocation is a node's workload (node:read) in one namespace
	// (namespace:read there), as writing one needs node:write and
	// namespace:claim: without the second a node:read token read every
	// namespace's allocations. The list across namespaces needs read on
	// every namespace, as the volume list does; ?namespace= asks for one.
	"GET /v1/allocs": both(need(acl.NodeRead), needNS(acl.NamespaceRead, nsQueryOrAll)),
	// An allocation is the scheduler's word (node:write) about a
	// workload of one namespace: ending it releases the claims it holds
	// there. So each allocation written needs namespace:claim in its
	// namespace too (the one named and the one it is stored in), as
	// Nomad scopes an allocation's lifecycle to its namespace; without
	// it a node:write token ended any namespace's allocations.
	"PUT /v1/allocs":        both(need(acl.NodeWrite), needNS(acl.NamespaceClaim, nsAllocsBody)),
	"POST /v1/allocs":       both(need(acl.NodeWrite), needNS(acl.NamespaceClaim, nsAllocsBody)),
	"GET /v1/alloc/{id}":    both(need(acl.NodeRead), needNS(acl.NamespaceRead, nsAllocPath)),
	"GET /v1/events":        need(acl.EventsRead),
	"PUT /v1/system/gc":     audited(need(acl.OperatorWrite), "system-gc"),
	"POST /v1/system/gc":    audited(need(acl.OperatorWrite), "system-gc"),
	"GET /v1/status/leader": {open: true},
	"GET /v1/metrics":       need(acl.OperatorRead),
	"/v1/volume/{$}":        {open: true},
	"/v1/node/{$}":          {open: true},
	"/v1/plugin/{$}":        {open: true},
	"/v1/alloc/{$}":         {open: true},
	"GET /v1/status/peers":  need(acl.OperatorRead),
	"GET /v1/modules":       need(acl.ModulesRead),
	// The Nomad bridge's status names allocations, nodes and volumes.
	"GET /v1/scheduler/status": need(acl.OperatorRead),
	"GET /v1/module/{id}":      need(acl.ModulesRead),
	"PUT /v1/modules/reload":   audited(need(acl.ModulesReload), "module-reload"),
	"POST /v1/modules/reload":  audited(need(acl.ModulesReload), "module-reload"),
	// `volhost module record`: a recorded module view shows the volume's claims, nodes
	// and context, so it is read like the volume itself.
	// A module view carries the claims' nodes (their IDs, topology and
	// meta) besides the volume: node:read as well, as GET /v1/node/ID
	// needs, or a reader of one namespace saw what only node:read shows.
	"GET /v1/volume/{id}/module-view": both(need(acl.NodeRead), needNS(acl.NamespaceRead, nsQuery)),
	// Rollout changes what judges volumes: privileged like a reload, audited.
	"PUT /v1/module/{id}/promote":   audited(need(acl.ModulesReload), "module-promote"),
	"POST /v1/module/{id}/promote":  audited(need(acl.ModulesReload), "module-promote"),
	"PUT /v1/module/{id}/rollback":  audited(need(acl.ModulesReload), "module-rollback"),
	"POST /v1/module/{id}/rollback": audited(need(acl.ModulesReload), "module-rollback"),
	"PUT /v1/module/{id}/shadow":    audited(need(acl.ModulesReload), "module-shadow"),
	"DELETE /v1/module/{id}/shadow": audited(need(acl.ModulesReload), "module-shadow-discard"),
	"POST /v1/module/{id}/shadow":   audited(need(acl.ModulesReload), "module-shadow"),
	// A snapshot carries volume secrets sealed with the keyring: saving one needs operator:write. Restoring replaces the ACL
	// tokens and policies too, so it needs a management token: with
	// operator:write alone it could mint any token it likes.
	"GET /v1/operator/snapshot":        audited(need(acl.OperatorWrite), "snapshot-save"),
	"PUT /v1/operator/snapshot":        audited(need(acl.Management), "snapshot-restore"),
	"POST /v1/operator/snapshot":       audited(need(acl.Management), "snapshot-restore"),
	"GET /v1/operator/keyring":         need(acl.OperatorRead),
	"PUT /v1/operator/keyring/rotate":  audited(need(acl.OperatorWrite), "keyring-rotate"),
	"POST /v1/operator/keyring/rotate": audited(need(acl.OperatorWrite), "keyring-rotate"),
	"POST " + joinPath:                 {join: true, audit: "raft-join"},
	"PUT " + joinPath:                  {join: true, audit: "raft-join"},

	"GET /v1/operator/raft/configuration":    need(acl.OperatorRead),
	"GET /v1/operator/raft/digest":           need(acl.OperatorRead),
	"DELETE /v1/operator/raft/peer":          audited(need(acl.OperatorWrite), "raft-remove-peer"),
	"PUT /v1/operator/raft/transfer-leader":  audited(need(acl.OperatorWrite), "raft-transfer-leader"),
	"POST /v1/operator/raft/transfer-leader": audited(need(acl.OperatorWrite), "raft-transfer-leader"),

	// The web UI: its static assets are public, every datum it
	// shows comes from an authorized API call carrying the operator's token.
	"GET /ui/":                            {open: true},
	"GET /v1/acl/token/self/capabilities": {self: true},
	"GET /v1/stats":                       needNS(acl.NamespaceRead, nsQueryOrAll),

	"POST /v1/acl/bootstrap":       {open: true},
	"PUT /v1/acl/bootstrap":        {open: true},
	"GET /v1/acl/policies":         need(acl.Management),
	"GET /v1/acl/policy/{name}":    need(acl.Management),
	"PUT /v1/acl/policy/{name}":    need(acl.Management),
	"POST /v1/acl/policy/{name}":   need(acl.Management),
	"DELETE /v1/acl/policy/{name}": need(acl.Management),
	"GET /v1/acl/tokens":           need(acl.Management),
	"PUT /v1/acl/token":            need(acl.Management),
	"POST /v1/acl/token":           need(acl.Management),
	"GET /v1/acl/token/self":       {self: true},
	"GET /v1/acl/token/{id}":       need(acl.Management),
	"DELETE /v1/acl/token/{id}":    need(acl.Management),
}

// PermissionDenied is a refused request (403). It names the capability
// (and namespace) that was missing, and why the token gave none.
type PermissionDenied struct {
	Capability acl.Capability
	Namespace  string
	Node       string // the node of a node-scoped check
	Reason     error  // the token problem, nil when the token lacks the capability
	// NoToken: the request carried no token at all, so the anonymous
	// policy was asked; the message says so and how to send one.
	NoToken bool
}

// The parts of a denial that speak HTTP. The CLI swaps them for its own
// flags (cmd/volhost), so a CLI user is never told to set a header or a
// query parameter.
const (
	HintListOneNamespace = " (pass ?namespace= to ask for one)"
	HintNoToken          = " (no token was sent: set the " + TokenHeader + " header or Authorization: Bearer)"
)

func (e *PermissionDenied) Error() string {
	msg := "Permission denied: missing capability " + string(e.Capability)
	if e.Capability.Namespaced() {
		switch e.Namespace {
		case "*":
			msg += " on every namespace" + HintListOneNamespace
		case storedNamespace:
			msg += " on the namespace an allocation of the request is stored in"
		default:
			msg += fmt.Sprintf(" on namespace %q", e.Namespace)
		}
	}
	if e.Node != "" {
		msg += fmt.Sprintf(" on node %q", e.Node)
	}
	if e.Reason != nil {
		msg += " (" + e.Reason.Error() + ")"
	}
	if e.NoToken {
		msg += HintNoToken
	}
	return msg
}

// identityKey carries the caller's identity in the request context.
type identityKey struct{}

// identityOf is the identity the middleware resolved (nil with ACL off).
func identityOf(r *http.Request) *acl.Identity {
	id, _ := r.Context().Value(identityKey{}).(*acl.Identity)
	return id
}

// RequestToken reads the secret from X-Volhost-Token, else from
// "Authorization: Bearer". A malformed Authorization header gives a
// secret that never resolves, so it is denied rather than ignored.
func RequestToken(r *http.Request) string {
	if t := strings.TrimSpace(r.Header.Get(TokenHeader)); t != "" {
		return t
	}
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, tok, ok := strings.Cut(a, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "\x00malformed"
		}
		return strings.TrimSpace(tok)
	}
	return ""
}

// VerifiedServerHeader is set by a follower forwarding a request whose
// caller presented a verified server certificate: the leader sees only
// the follower's connection. The leader believes it only from a
// connection that is itself a verified server; anyone else's is ignored.
const VerifiedServerHeader = "X-Volhost-Verified-Server"

// vouchServer sets VerifiedServerHeader on a forwarded request, never
// passing on a caller's own.
func (s *Server) vouchServer(in, out *http.Request) {
	out.Header.Del(VerifiedServerHeader)
	if s.isServer(in, false) {
		out.Header.Set(VerifiedServerHeader, "true")
	}
}

// isServer reports whether the caller of r is a server of this cluster:
// its connection presented a verified server certificate and, for a
// forwarded request (trustForward), the forwarding server vouched for the
// original caller.
func (s *Server) isServer(r *http.Request, trustForward bool) bool {
	cfg := s.auth.cfg
	if cfg == nil || cfg.ServerIdentity == nil || r.TLS == nil || !cfg.ServerIdentity(r.TLS) {
		return false
	}
	if trustForward && r.Header.Get(ForwardedHeader) != "" {
		return r.Header.Get(VerifiedServerHeader) == "true"
	}
	return true
}

// authorizing checks every request this server serves against its
// route's rule before the handler runs.
func (s *Server) authorizing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := s.auth.cfg
		_, pattern := s.mux.Handler(r)
		if pattern == "" {
			next.ServeHTTP(w, r) // 404/405: nothing to protect
			return
		}
		if cfg == nil {
			// ACLs off: nothing to check, but a privileged action is
			// audited all the same, as "anonymous".
			s.serveAudited(w, r, routeRules[pattern], nil, next)
			return
		}
		ru, ok := routeRules[pattern]
		if !ok {
			s.log.Error("route declares no ACL capability; denied", "pattern", pattern)
			WriteError(w, &httpError{status: http.StatusForbidden, msg: "Permission denied: route " + pattern + " declares no capability"})
			return
		}
		if ru.open {
			next.ServeHTTP(w, r)
			return
		}
		id, tokenErr := cfg.Service.Resolve(RequestToken(r))
		if tokenErr != nil && !isTokenError(tokenErr) {
			WriteError(w, tokenErr) // the state could not be read: 500
			return
		}
		if err := s.check(w, r, ru, id, tokenErr); err != nil {
			s.log.Info("request denied", "method", r.Method, "path", r.URL.Path, "accessor", id.Accessor(), "reason", err.Error())
			var pd *PermissionDenied
			if errors.As(err, &pd) {
				pd.NoToken = RequestToken(r) == ""
				err = &httpError{status: http.StatusForbidden, msg: pd.Error()}
			}
			WriteError(w, err)
			return
		}
		ctx := context.WithValue(r.Context(), identityKey{}, id)
		r = r.WithContext(context.WithValue(ctx, grantKey{}, &grant{secret: RequestToken(r), rule: ru}))
		s.serveAudited(w, r, ru, id, next)
	})
}

// grant is what authorized a request: checked again while a blocking
// query waits (untilRevoked).
type grant struct {
	secret string
	rule   rule
}

type grantKey struct{}

// revocationWatcher is implemented by *acl.Service (its Resolver).
type revocationWatcher interface {
	WatchRevocation(ctx context.Context, secret string, allowed func(*acl.Identity) error) <-chan error
}

// untilRevoked is r's context, cancelled with the reason (wrapping
// acl.ErrRevoked) once the token that authorized r stops passing r's
// route rule: deleted, expired, or a policy changed. A blocking query
// waits up to MaxWait; without this it would answer, minutes after its
// token was revoked, what that token may no longer read. stop releases
// the watch.
func (s *Server) untilRevoked(r *http.Request) (ctx context.Context, stop func()) {
	g, _ := r.Context().Value(grantKey{}).(*grant)
	var w revocationWatcher
	if cfg := s.auth.cfg; cfg != nil {
		w, _ = cfg.Service.(revocationWatcher)
	}
	cctx, cancel := context.WithCancelCause(r.Context())
	if g == nil || w == nil || g.rule.open {
		return cctx, func() { cancel(nil) }
	}
	// Only GET routes block: their rule reads the path and query, never
	// the body, so the check may run again from the watch's goroutine.
	revoked := w.WatchRevocation(cctx, g.secret, func(id *acl.Identity) error {
		return s.check(nil, r, g.rule, id, nil)
	})
	go func() {
		select {
		case err := <-revoked:
			cancel(err)
		case <-cctx.Done():
		}
	}()
	return cctx, func() { cancel(nil) }
}

// revokedError is the 403 of a request whose token was revoked while it
// waited: the watch ended ctx, or the write that woke the query came
// before the watch (a policy write is itself an event), so the token is
// checked once more before the answer goes out. nil: still allowed.
func (s *Server) revokedError(ctx context.Context, r *http.Request) error {
	cause := context.Cause(ctx)
	if !errors.Is(cause, acl.ErrRevoked) {
		g, _ := r.Context().Value(grantKey{}).(*grant)
		if g == nil || g.rule.open {
			return nil
		}
		id, err := s.auth.cfg.Service.Resolve(g.secret)
		if err == nil {
			err = s.check(nil, r, g.rule, id, nil)
		}
		if err == nil {
			return nil
		}
		if !isTokenError(err) && !errors.As(err, new(*PermissionDenied)) {
			return err // the state could not be read: 500
		}
		cause = fmt.Errorf("%w: %w", acl.ErrRevoked, err)
	}
	return &httpError{status: http.StatusForbidden, msg: "Permission denied: " + cause.Error()}
}

// currentACL is the ACL of the token that authorized r as it is now,
// resolved again at each call: what a read filters item by item (events
// by their subject) must be judged by the policy in force when the read
// runs, and a blocking query runs again at every wake, possibly minutes
// after it was authorized. nil: ACLs are off, or the route is open. A
// token gone since is a 403 wrapping acl.ErrRevoked.
func (s *Server) currentACL(r *http.Request) (*acl.ACL, error) {
	g, _ := r.Context().Value(grantKey{}).(*grant)
	if s.auth.cfg == nil || g == nil || g.rule.open {
		return nil, nil
	}
	id, err := s.auth.cfg.Service.Resolve(g.secret)
	if err != nil {
		if !isTokenError(err) {
			return nil, err // the state could not be read: 500
		}
		return nil, &httpError{status: http.StatusForbidden, msg: fmt.Sprintf("Permission denied: %v: %v", acl.ErrRevoked, err)}
	}
	if id.ACL == nil {
		return acl.DenyAll(), nil
	}
	return id.ACL, nil
}

// serveAudited serves r and, when its route is privileged and the answer
// is a success, records the audit event with id's accessor ("anonymous"
// for nil: ACLs off or no token).
func (s *Server) serveAudited(w http.ResponseWriter, r *http.Request, ru rule, id *acl.Identity, next http.Handler) {
	action := ru.audit
	if force, _ := queryBool(r, "force"); ru.force && force {
		action = "force-deregister"
	}
	if action == "" {
		next.ServeHTTP(w, r)
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	next.ServeHTTP(rec, r)
	if rec.status >= 200 && rec.status < 300 {
		s.auditAction(r, action, id)
	}
}

func isTokenError(err error) bool {
	return errors.Is(err, acl.ErrTokenMalformed) || errors.Is(err, acl.ErrTokenNotFound) || errors.Is(err, acl.ErrTokenExpired)
}

// check decides one request; a denial is a *PermissionDenied (403).
func (s *Server) check(w http.ResponseWriter, r *http.Request, ru rule, id *acl.Identity, tokenErr error) error {
	if err := s.checkOne(w, r, ru, id, tokenErr); err != nil || ru.and == nil {
		return err
	}
	return s.check(w, r, *ru.and, id, tokenErr)
}

// checkOne decides one rule of a request.
func (s *Server) checkOne(w http.ResponseWriter, r *http.Request, ru rule, id *acl.Identity, tokenErr error) error {
	if ru.self {
		if tokenErr != nil {
			return &PermissionDenied{Capability: "acl:token-self", Reason: tokenErr}
		}
		return nil
	}
	if ru.join {
		if tokenErr == nil && id.ACL.IsManagement() {
			return nil
		}
		if s.isServer(r, true) {
			return nil
		}
		return &PermissionDenied{Capability: "management (or a verified server certificate) to join the cluster", Reason: tokenErr}
	}
	c := ru.cap
	if ru.force {
		force, err := queryBool(r, "force")
		if err != nil {
			return err
		}
		if force {
			c = acl.NamespaceForceDeregister
		}
	}
	if ru.node != nodeNone {
		node := s.requestNode(w, r, ru.node)
		if tokenErr != nil || !id.ACL.AllowedNode(c, node) {
			return &PermissionDenied{Capability: c, Node: node, Reason: tokenErr}
		}
		return nil
	}
	if !c.Namespaced() {
		if tokenErr != nil || !id.ACL.Allowed(c, "") {
			return &PermissionDenied{Capability: c, Reason: tokenErr}
		}
		return nil
	}
	namespaces, all, err := s.requestNamespaces(w, r, ru.ns)
	if err != nil {
		return err
	}
	if all {
		if tokenErr != nil || !id.ACL.AllowedEverywhere(c) {
			return &PermissionDenied{Capability: c, Namespace: "*", Reason: tokenErr}
		}
		return nil
	}
	for _, ns := range namespaces {
		if tokenErr != nil || !id.ACL.Allowed(c, ns) {
			return &PermissionDenied{Capability: c, Namespace: s.shownNamespace(r, ru.ns, ns), Reason: tokenErr}
		}
	}
	return nil
}

// shownNamespace is the namespace a denial names. A namespace the caller
// did not name but the server looked up is not named: a denial "on
// namespace prod" would tell a token that may not read prod that the
// allocation exists and where.
//   - GET /v1/alloc/ID without ?namespace= (the stored allocation's): the
//     denial says "every namespace", as the one for an allocation that
//     does not exist does, so the two cannot be told apart.
//   - PUT /v1/allocs (the namespace an allocation of the body is stored
//     in, when the body does not name it): the denial says only that it
//     is the namespace an allocation of the request is stored in
//     (storedNamespace). That such an allocation exists is the write's
//     to know (it would otherwise create it); whose it is is not.
func (s *Server) shownNamespace(r *http.Request, from nsFrom, ns string) string {
	switch from {
	case nsAllocPath:
		if r.URL.Query().Get("namespace") == "" {
			return "*"
		}
	case nsAllocsBody:
		// An unreadable body names nothing and is checked as "default":
		// that one is named back.
		if named, _ := s.bodyAllocs(r); len(named) > 0 && !slices.Contains(named, ns) {
			return storedNamespace
		}
	}
	return ns
}

// storedNamespace stands, in a denial, for a namespace the request did not
// name (shownNamespace).
const storedNamespace = "\x00stored"

// allowedNow reports whether the token that authorized r may use c in
// namespace ns as its policy is now (Server.currentACL): a blocking read
// runs again at every wake, and each run shows only what the token may
// read at that run. The denial names ns as the route's rule would
// (Server.shownNamespace). nil: allowed, or ACLs are off.
func (s *Server) allowedNow(r *http.Request, c acl.Capability, from nsFrom, ns string) error {
	a, err := s.currentACL(r)
	if err != nil || a == nil || a.Allowed(c, ns) {
		return err
	}
	pd := &PermissionDenied{Capability: c, Namespace: s.shownNamespace(r, from, ns)}
	return &httpError{status: http.StatusForbidden, msg: pd.Error()}
}

// visibleNow is the filter of a list across namespaces: whether the
// token that authorized r may read namespace ns as its policy is now
// (Server.currentACL), resolved once per run. With ACLs off every
// namespace is visible.
func (s *Server) visibleNow(r *http.Request) (func(ns string) bool, error) {
	a, err := s.currentACL(r)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return func(string) bool { return true }, nil
	}
	return func(ns string) bool { return a.Allowed(acl.NamespaceRead, ns) }, nil
}

// requestNamespaces finds the namespaces a request acts on; all is a
// cross-namespace list. Bodies are read (within the body limit) and put
// back for the handler.
func (s *Server) requestNamespaces(w http.ResponseWriter, r *http.Request, from nsFrom) (_ []string, all bool, _ error) {
	q := r.URL.Query().Get("namespace")
	switch from {
	case nsQueryOrAll:
		if q == "" {
			return nil, true, nil
		}
		return []string{q}, false, nil
	case nsQuery:
		return []string{orDefault(q)}, false, nil
	case nsClaimBody:
		if q != "" {
			return []string{q}, false, nil
		}
		var body struct {
			Namespace string `json:"namespace"`
		}
		s.peekBody(w, r, &body)
		return []string{orDefault(body.Namespace)}, false, nil
	case nsVolumesBody:
		var body struct {
			Volumes []*struct {
				Namespace string `json:"namespace"`
			} `json:"volumes"`
		}
		s.peekBody(w, r, &body)
		var out []string
		for _, v := range body.Volumes {
			ns := DefaultNamespace
			if v != nil {
				ns = orDefault(v.Namespace)
			}
			if !slices.Contains(out, ns) {
				out = append(out, ns)
			}
		}
		if len(out) == 0 {
			out = []string{DefaultNamespace} // unreadable body: the handler answers 400, if allowed to run
		}
		return out, false, nil
	case nsAllocsBody:
		out, err := s.allocNamespaces(w, r)
		return out, false, err
	case nsAllocPath:
		if q != "" {
			return []string{q}, false, nil
		}
		ns, found, err := s.allocNamespaceOf(r)
		if err != nil || !found {
			// An allocation that does not exist is answered 404 only to
			// a token that may read every namespace: to any other it is
			// refused as one it may not read, so a 404 tells nothing of
			// the allocations of the namespaces it may not read.
			return nil, err == nil, err
		}
		return []string{ns}, false, nil
	}
	return nil, false, fmt.Errorf("unknown namespace source %d", from)
}

// allocNamespaces finds the namespaces an allocation upsert writes in:
// each allocation's in the body and, for one already stored, the one it
// is in. The store refuses a move between namespaces anyway (state
// validateAllocUpsert); checking the stored one here makes a body naming
// the caller's namespace for another's allocation a 403 that names
// nothing of it, not a 400 that names its namespace.
func (s *Server) allocNamespaces(_ http.ResponseWriter, r *http.Request) ([]string, error) {
	out, ids := s.bodyAllocs(r)
	add := func(ns string) {
		if ns = orDefault(ns); !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	if len(ids) > 0 {
		_, err := s.store.Query(r.Context(), 0, 0, func(_ memdb.WatchSet, rd Reader) (uint64, error) {
			for _, id := range ids {
				old, err := rd.AllocByID(nil, id)
				if err != nil {
					return 0, err
				}
				if old != nil {
					add(old.Namespace)
				}
			}
			return 0, nil
		})
		if err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		out = []string{DefaultNamespace} // unreadable body: the handler answers 400, if allowed to run
	}
	return out, nil
}

// bodyAllocs reads an allocation upsert's body: the namespaces it names
// (each allocation's, "default" when omitted) and the allocations' IDs.
func (s *Server) bodyAllocs(r *http.Request) (named, ids []string) {
	var body struct {
		Allocs []*struct {
			ID        string `json:"id"`
			Namespace string `json:"namespace"`
		} `json:"allocs"`
	}
	s.peekBody(nil, r, &body)
	for _, a := range body.Allocs {
		if a == nil {
			continue
		}
		if ns := orDefault(a.Namespace); !slices.Contains(named, ns) {
			named = append(named, ns)
		}
		ids = append(ids, a.ID)
	}
	return named, ids
}

// allocNamespaceOf finds the namespace the allocation of the {id} path
// segment is stored in; found is false when there is none.
func (s *Server) allocNamespaceOf(r *http.Request) (ns string, found bool, _ error) {
	// The middleware runs before the mux sets PathValue (see requestNode).
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/alloc/"), "/")
	id, err := url.PathUnescape(seg)
	if err != nil || id == "" {
		return "", false, nil // the handler answers 400, if allowed to run
	}
	_, err = s.store.Query(r.Context(), 0, 0, func(_ memdb.WatchSet, rd Reader) (uint64, error) {
		a, err := rd.AllocByID(nil, id)
		if a != nil {
			ns, found = orDefault(a.Namespace), true
		}
		return 0, err
	})
	return ns, found, err
}

// requestNode finds the node a node route is about. An unreadable body
// gives "", which only a node-wide grant allows (the handler then answers
// 400 if allowed to run).
func (s *Server) requestNode(w http.ResponseWriter, r *http.Request, from nodeFrom) string {
	if from == nodePath {
		// The middleware runs before the mux sets PathValue: take the
		// segment after /v1/node/ as the mux does, escaped, then unescape.
		seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/node/"), "/")
		id, err := url.PathUnescape(seg)
		if err != nil {
			return ""
		}
		return id
	}
	var body struct {
		Node *struct {
			ID string `json:"id"`
		} `json:"node"`
	}
	s.peekBody(w, r, &body)
	if body.Node == nil {
		return ""
	}
	return body.Node.ID
}

func orDefault(ns string) string {
	if ns == "" {
		return DefaultNamespace
	}
	return ns
}

// peekBody decodes the body leniently into v and restores it unchanged.
// A body over the limit is left for the handler to refuse (413).
func (s *Server) peekBody(_ http.ResponseWriter, r *http.Request, v any) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
	rest := r.Body
	r.Body = readCloser{Reader: io.MultiReader(bytes.NewReader(buf), rest), Closer: rest}
	if err != nil {
		return
	}
	_ = json.Unmarshal(buf, v)
}

type readCloser struct {
	io.Reader
	io.Closer
}

// auditTimeout bounds writing an audit event.
const auditTimeout = 10 * time.Second

// auditAction records a privileged action that succeeded, with the
// accessor of the token that asked (never the secret). When the event
// cannot be committed (a follower reloading its own modules has no log
// to write to) the log line is the record.
func (s *Server) auditAction(r *http.Request, action string, id *acl.Identity) {
	accessor := id.Accessor()
	if (id == nil || id.Token == nil) && action == "raft-join" && s.isServer(r, true) {
		accessor = "server-certificate" // authorized by its certificate, not a token
	}
	ev := &structs.Event{
		Type:    structs.EventAudit,
		Message: fmt.Sprintf("%s %s", r.Method, r.URL.Path),
		Fields:  map[string]string{"action": action, "accessor": accessor},
	}
	if strings.HasPrefix(r.URL.Path, "/v1/volume/") {
		ev.Namespace = orDefault(r.URL.Query().Get("namespace"))
		ev.VolumeID = r.PathValue("id")
		if n := r.URL.Query().Get("node"); n != "" {
			ev.NodeID = n
		}
	}
	if id := r.URL.Query().Get("id"); id != "" && strings.HasPrefix(r.URL.Path, "/v1/operator/") {
		ev.Fields["peer"] = id
	}
	if strings.HasPrefix(r.URL.Path, "/v1/node/") {
		ev.NodeID = r.PathValue("id")
	}
	if force, _ := queryBool(r, "force"); force {
		ev.Fields["force"] = "true"
	}
	s.log.Info("audit", "action", ev.Fields["action"], "accessor", accessor, "method", r.Method, "path", r.URL.Path)
	audit := s.cfg.Audit
	if audit == nil && s.auth.cfg != nil {
		audit = s.auth.cfg.Audit
	}
	if audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	if _, _, err := audit.Apply(ctx, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{ev}}); err != nil {
		s.log.Warn("audit event not committed; this log line is the record", "action", ev.Fields["action"], "accessor", accessor, "error", err)
	}
}
