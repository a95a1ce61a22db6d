// Package nomad is the Nomad bridge: a scheduler.Source that lists Nomad's
// nodes and allocations, follows its event stream (topics Allocation and
// Node) and mirrors them into volhost's nodes and allocations, claiming the
// volhost volumes each task group declares in its meta.
//
// The rules it keeps (RATIONALE "Nomad bridge"):
//   - an allocation is live while its client status is pending, running
//     or unknown, whatever its desired status: Nomad unmounted volumes
//     during shutdown_delay by going by the desired status (hashicorp/nomad
//     #24130, #25819); it ends when the client reports complete or failed;
//   - lost is not stopped: the server marks a dead client's allocations
//     lost while their tasks may still run there, so a lost allocation is
//     held (mirrored as still live) until its node is fenced in volhost
//     or is gone from Nomad, or its client, back, reports it again (a
//     node back is not enough: Nomad reports it ready before its client
//     has stopped what it lost);
//   - removals emit no event (system gc): a periodic re-list treats a node
//     that vanished as gone and an allocation that vanished as ended;
//   - each batch is committed with the Nomad index it reaches (volhost's
//     cursor), per object changes are applied only when their ModifyIndex
//     moved, and a Nomad index going backwards is a reset: list again.
package nomad

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"
)

// NodeIDFrom values: which Nomad node field is the volhost node ID.
const (
	NodeIDFromName = "name"
	NodeIDFromID   = "id"
)

// Defaults.
const (
	DefaultRelistInterval = time.Minute
	DefaultRetryMax       = 30 * time.Second
	DefaultMetaPrefix     = "volhost_volume_"
)

// Config is the agent's `scheduler "nomad" { ... }` block.
type Config struct {
	Address string `hcl:"address,optional"` // default http://127.0.0.1:4646
	Token   string `hcl:"token,optional"`   // Nomad ACL token (read nodes, read jobs)
	Region  string `hcl:"region,optional"`
	// Namespaces to mirror; empty: every namespace ("*").
	Namespaces []string `hcl:"namespaces,optional"`
	// NodeID says which Nomad node field names the volhost node: "name"
	// (default, the node agent's node_id is usually the host name) or "id".
	NodeID string `hcl:"node_id,optional"`
	// RelistInterval is how often everything is listed again, which is
	// how removals (system gc emits no event) are seen. Default 1m.
	RelistInterval string `hcl:"relist_interval,optional"`
	// RetryMax caps the backoff between attempts to reach Nomad.
	RetryMax string     `hcl:"retry_max,optional"`
	TLS      *TLSConfig `hcl:"tls,block"`
}

// TLSConfig reaches a Nomad agent over HTTPS.
type TLSConfig struct {
	CACert     string `hcl:"ca_cert,optional"`
	ClientCert string `hcl:"client_cert,optional"`
	ClientKey  string `hcl:"client_key,optional"`
	ServerName string `hcl:"server_name,optional"`
	Insecure   bool   `hcl:"insecure,optional"`
}

// ShownAddress is the address as volhost shows it (status, events,
// errors, logs): without the user information a URL may carry, whose
// password the Nomad client sends as basic authentication, a credential
// like the token.
func (c Config) ShownAddress() string {
	u, err := url.Parse(c.Address)
	if err != nil {
		return "(the configured Nomad address, not shown: it does not parse as a URL)"
	}
	u.User = nil
	return u.String()
}

// Insecure names what the configuration exposes, "" when nothing: a
// token (or an address's password) sent over plain HTTP to another
// machine crosses the network in clear. The agent logs it at start.
func (c Config) Insecure() string {
	u, err := url.Parse(c.Address)
	if err != nil || u.Scheme != "http" {
		return ""
	}
	if _, hasPassword := u.User.Password(); c.Token == "" && !hasPassword {
		return ""
	}
	if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
		return ""
	}
	return fmt.Sprintf("INSECURE: scheduler \"nomad\" sends its token to %s over plain HTTP: it crosses the network in clear; use https with a tls block", c.ShownAddress())
}

// Settings is a validated Config.
type Settings struct {
	Config
	Relist   time.Duration
	RetryMax time.Duration
}

// Mirrors reports whether Nomad namespace ns is one the bridge lists.
func (s Settings) Mirrors(ns string) bool { return mirrors(s.Namespaces, ns) }

func mirrors(namespaces []string, ns string) bool {
	return len(namespaces) == 0 || slices.Contains(namespaces, "*") || slices.Contains(namespaces, ns)
}

// Validate checks c and fills the defaults.
func (c Config) Validate() (Settings, error) {
	s := Settings{Config: c, Relist: DefaultRelistInterval, RetryMax: DefaultRetryMax}
	if s.Address == "" {
		s.Address = "http://127.0.0.1:4646"
	}
	switch s.NodeID {
	case "":
		s.NodeID = NodeIDFromName
	case NodeIDFromName, NodeIDFromID:
	default:
		return s, fmt.Errorf("scheduler \"nomad\": node_id must be %q or %q, got %q", NodeIDFromName, NodeIDFromID, s.NodeID)
	}
	for _, d := range []struct {
		name string
		v    string
		dst  *time.Duration
	}{{"relist_interval", c.RelistInterval, &s.Relist}, {"retry_max", c.RetryMax, &s.RetryMax}} {
		if d.v == "" {
			continue
		}
		p, err := time.ParseDuration(d.v)
		if err != nil || p <= 0 {
			return s, fmt.Errorf("scheduler \"nomad\": %s: %q is not a positive duration (e.g. \"30s\")", d.name, d.v)
		}
		*d.dst = p
	}
	if t := c.TLS; t != nil && (t.ClientCert == "") != (t.ClientKey == "") {
		return s, fmt.Errorf("scheduler \"nomad\": tls: client_cert and client_key go together")
	}
	return s, nil
}
