package csi

import (
	"net/url"
	"path"

	"github.com/volhost/volhost/host/structs"
)

// grpcTarget turns a CSI endpoint into a gRPC target. Only unix:///abs/path
// and tcp://host:port are accepted: anything else is a registration mistake
// the operator must see at once, not a dial that fails later.
func grpcTarget(endpoint string) (string, error) {
	if err := structs.ValidateEndpoint("endpoint", endpoint); err != nil {
		return "", err
	}
	u, _ := url.Parse(endpoint) // parsed by ValidateEndpoint
	if u.Scheme == "unix" {
		return "unix://" + path.Clean(u.Path), nil
	}
	// passthrough: the dialer resolves the name itself, so no DNS resolver
	// goroutine is kept per plugin.
	return "passthrough:///" + u.Host, nil
}
