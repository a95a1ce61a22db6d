package main

import (
	"strings"
	"testing"
)

// TestTokenOverPlainHTTPIsNamed: VOLHOST_TOKEN with a plain http://
// VOLHOST_ADDR naming another machine sends the token in clear on every
// request, and the CLI said nothing (the agent names the same for its
// Nomad token as INSECURE at start). The CLI warns on stderr, naming the
// address; loopback addresses, and https, are quiet.
func TestTokenOverPlainHTTPIsNamed(t *testing.T) {
	const tok = "8b1c2d3e-0000-4000-8000-000000000001"
	for _, tc := range []struct {
		addr, token string
		warn        bool
	}{
		{"http://volhost.invalid:4747", tok, true},
		{"volhost.invalid:4747", tok, true},
		{"http://127.0.0.1:1", tok, false},
		{"http://localhost:1", tok, false},
		{"http://[::1]:1", tok, false},
		{"https://volhost.invalid:4747", tok, false},
		{"http://volhost.invalid:4747", "", false},
	} {
		r := runEnv(map[string]string{"VOLHOST_ADDR": tc.addr, "VOLHOST_TOKEN": tc.token}, "volume", "status")
		warned := strings.Contains(r.stderr, "plain HTTP")
		if warned != tc.warn {
			t.Errorf("%s (token %v): warned %v, want %v\n%s", tc.addr, tc.token != "", warned, tc.warn, r.stderr)
		}
		if strings.Contains(r.stderr, tok) || strings.Contains(r.stdout, tok) {
			t.Errorf("%s: the CLI printed the token", tc.addr)
		}
	}
}
