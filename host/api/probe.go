package api

import (
	"errors"
	"net/http"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// probeErrorMessage is all a caller without ProbeErrorDetail learns of a
// failed endpoint probe.
const probeErrorMessage = "endpoint unreachable"

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
// ACLs on, a caller holding operator:write (issue 13). With ACLs off nobody:
// an anonymous caller is exactly who must not map the host.
func (s *Server) probeDetailAllowed(r *http.Request) bool {
	if s.cfg.ProbeErrorDetail != nil {
		return s.cfg.ProbeErrorDetail(r)
	}
	id := identityOf(r)
	return id != nil && id.ACL != nil && id.ACL.Allowed(acl.OperatorWrite, "")
}
