package api

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Content types the API accepts on writes.
const (
	jsonType  = "application/json"
	octetType = "application/octet-stream"
)

// rawBodyRoutes are the only paths whose writes carry a non-JSON body.
var rawBodyRoutes = map[string]string{"/v1/operator/snapshot": octetType}

// guard refuses, before any routing or forwarding, the requests a browser
// can be made to send on a page's behalf:
//
//   - a foreign Origin (CSRF: a page on another site POSTing to the agent);
//   - a Host that is not an address of this agent (DNS rebinding: a name the
//     attacker controls resolving to 127.0.0.1, which would make the agent
//     same-origin with the attacker's page);
//   - a write whose Content-Type is not application/json (415). A form or a
//     no-cors fetch can only send text/plain, form or multipart bodies
//     without a CORS preflight, which the agent never grants; the snapshot
//     upload is the one route that takes application/octet-stream, and only
//     it.
//
// CLI and server-to-server requests send no Origin and an IP or configured
// Host, so they pass.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.checkHost(r); err != nil {
			WriteError(w, err)
			return
		}
		if err := checkOrigin(r); err != nil {
			s.log.Warn("cross-origin request refused", "origin", r.Header.Get("Origin"), "host", r.Host,
				"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			WriteError(w, err)
			return
		}
		// Unknown routes and wrong methods get their 404/405 (wrap).
		if _, pattern := s.mux.Handler(r); pattern != "" {
			if err := checkContentType(r); err != nil {
				WriteError(w, err)
				return
			}
		}
		s.setDeadlines(w, r)
		next.ServeHTTP(w, r)
	})
}

func forbidden(format string, args ...any) error {
	return &httpError{status: http.StatusForbidden, msg: fmt.Sprintf(format, args...)}
}

// checkHost allows IP literals, localhost, and the configured names.
func (s *Server) checkHost(r *http.Request) error {
	if s.hosts["*"] {
		return nil
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	switch {
	case host == "":
		return nil // HTTP/1.0 without Host: not a browser
	case net.ParseIP(host) != nil, host == "localhost", strings.HasSuffix(host, ".localhost"), s.hosts[host]:
		return nil
	}
	return forbidden("Host %q is not a name of this agent (DNS rebinding guard): use its IP address, or add the name to http.allowed_hosts", r.Host)
}

// checkOrigin allows no Origin (CLI, curl, servers) and same-origin
// browser requests only.
func checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return forbidden("cross-origin request from %q refused (CSRF guard)", origin)
	}
	return nil
}

// checkContentType requires a JSON body type on every POST, PUT and PATCH
// (with or without a body, so an empty form POST is refused too), and on a
// DELETE that carries a body.
func checkContentType(r *http.Request) error {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	case http.MethodDelete:
		if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
			return nil
		}
	default:
		return nil
	}
	want := jsonType
	if t, ok := rawBodyRoutes[r.URL.Path]; ok {
		want = t
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != want {
		got := ct
		if got == "" {
			got = "none"
		}
		return &httpError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("%s %s needs Content-Type %s, got %s", r.Method, r.URL.Path, want, got)}
	}
	return nil
}
