package api

import (
	"errors"
	"net"
	"net/http"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// probeErrorMessage is all a caller without ProbeErrorDetail learns of a
// failed endpoint probe.
// It says where the detail is and who may see it, so the caller knows
// what to do next.
const probeErrorMessage = "endpoint unreachable: the dial error is in the agent's log " +
	"(it is shown here to a caller holding operator:write, or on the agent's own host while ACLs are off)"

// probeError hides the detail of a failed endpoint probe from callers the
// ProbeErrorDetail hook does not vouch for: "connection refused" against
// "no such file" would let anyone map the agent host's sockets and ports.
// The detail is logged for the operator. Other errors pass unchanged.
func (s *Server) probeError(r *http.Request, err error) error {
	var pe *structs.ProbeError
	if !errors.As(err, &pe) {
		return err
	}
	if s.probeDetailAllowed(r) {
		return err
	}
	s.log.Warn("endpoint probe failed", "field", pe.Field, "endpoint", pe.Endpoint, "error", pe.Err, "remote", r.RemoteAddr)
	return badRequest(pe.Field, "%s", probeErrorMessage)
}

// probeDetailAllowed: the ProbeErrorDetail hook when set; otherwise, with
// ACLs on, a caller holding operator:write. With ACLs off, a caller
// connected from the agent's own host (loopback, not forwarded by another
// server): it can list the host's sockets itself, and it is who a first
// registration comes from (an operator trying the walk-through learnt only
// "endpoint unreachable"). A remote anonymous caller is exactly who must
// not map the host.
func (s *Server) probeDetailAllowed(r *http.Request) bool {
	if s.cfg.ProbeErrorDetail != nil {
		return s.cfg.ProbeErrorDetail(r)
	}
	if s.auth.cfg == nil {
		return r.Header.Get(ForwardedHeader) == "" && fromLoopback(r)
	}
	id := identityOf(r)
	return id != nil && id.ACL != nil && id.ACL.Allowed(acl.OperatorWrite, "")
}

// fromLoopback reports whether r's connection comes from a loopback address.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
