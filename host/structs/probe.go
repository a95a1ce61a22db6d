package structs

import "fmt"

// ProbeError is a failed probe of a CSI endpoint at registration. Its
// detail (the dial error) names files and ports of the agent's host, so
// the API quotes it only to callers allowed to see it and otherwise says
// "endpoint unreachable" (host/api).
type ProbeError struct {
	Field    string // the request field holding the endpoint
	Endpoint string
	Err      error
}

func (e *ProbeError) Error() string {
	return fmt.Sprintf("%s: probing %s: %v", e.Field, e.Endpoint, e.Err)
}

func (e *ProbeError) Unwrap() error { return e.Err }
