package api

import (
	"errors"
	"net/http"

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
	if s.cfg.ProbeErrorDetail != nil && s.cfg.ProbeErrorDetail(r) {
		return err
	}
	s.log.Warn("endpoint probe failed", "field", pe.Field, "endpoint", pe.Endpoint, "error", pe.Err, "remote", r.RemoteAddr)
	return badRequest(pe.Field, "%s", probeErrorMessage)
}
