package csi

import (
	"net"
	"net/url"
	"path"

	"github.com/volhost/volhost/host/structs"
)

// grpcTarget turns a CSI endpoint into a gRPC target. Only unix:///abs/path
// and tcp://host:port are accepted: anything else is a registration mistake
// the operator must see at once, not a dial that fails later.
func grpcTarget(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", structs.Invalid("endpoint", "%q is not a URL: %v", endpoint, err)
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" || u.Opaque != "" || !path.IsAbs(u.Path) || path.Clean(u.Path) == "/" {
			return "", structs.Invalid("endpoint", "%q: want unix:///absolute/path/to.sock", endpoint)
		}
		return "unix://" + path.Clean(u.Path), nil
	case "tcp":
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil || port == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return "", structs.Invalid("endpoint", "%q: want tcp://host:port", endpoint)
		}
		// passthrough: the dialer resolves the name itself, so no DNS
		// resolver goroutine is kept per plugin.
		return "passthrough:///" + net.JoinHostPort(host, port), nil
	}
	return "", structs.Invalid("endpoint", "%q: scheme must be unix:// or tcp://", endpoint)
}
