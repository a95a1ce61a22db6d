package structs

import (
	"net"
	"net/url"
	"path"
	"strings"
	"unicode"
)

// EndpointForms is the accepted endpoint syntax, quoted in every endpoint
// error so an operator sees the fix with the mistake.
const EndpointForms = "want unix:///absolute/path/to.sock or tcp://host:port, e.g. unix:///run/csi/gcepd.sock"

// ValidateEndpoint checks a CSI endpoint: unix:///absolute/path or
// tcp://host:port, nothing else. It is the one check both registration (the
// FSM) and the CSI client's dial use, so a registration the store accepts
// is one the client can dial, and every endpoint mistake reads the same
// (there were two validators with two messages, and endpoints accepted at
// registration that failed only when a release dialed them).
func ValidateEndpoint(field, endpoint string) error {
	bad := func(why string) error {
		return Invalid(field, "%q is not a CSI endpoint (%s): %s", endpoint, why, EndpointForms)
	}
	for _, r := range endpoint {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return bad("it contains whitespace or control characters")
		}
	}
	if !strings.Contains(endpoint, "://") && !strings.HasPrefix(endpoint, "unix:") {
		// A bare path or host:port, the commonest mistake: url.Parse
		// calls "127.0.0.1:9000" a bad URL, which hides the fix.
		return bad("no scheme")
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return bad("not a URL")
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" {
			// unix://relative.sock parses "relative.sock" as a host.
			return bad("the socket path must be absolute: three slashes, unix:///" + strings.TrimPrefix(u.Host+u.Path, "/"))
		}
		if u.Opaque != "" || u.RawQuery != "" || !path.IsAbs(u.Path) || path.Clean(u.Path) == "/" {
			return bad("the socket path must be absolute")
		}
		return nil
	case "tcp":
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil || host == "" || port == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return bad("a tcp endpoint is host:port")
		}
		return nil
	case "":
		return bad("no scheme")
	}
	return bad("scheme " + u.Scheme + " is neither unix nor tcp")
}
