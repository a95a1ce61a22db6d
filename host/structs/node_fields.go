package structs

import (
	"path/filepath"
	"slices"
	"strings"
)

// OperatorFields names the fields of a node registration that are an
// operator's decision, not a node's report: the mode (agent), where the
// leader dials (plugin endpoints) and makes directories (root_dir), and
// the status the heartbeat tracker and fences own. Only a caller with
// operator:write may send them.
//
// A node-scoped token (node_id "n1" { policy = "write" }) could otherwise
// register n1 in direct mode with any endpoint, so the leader dialed
// unix sockets on its own host and created directories under any absolute
// root_dir there, or set heartbeat_lost, status_reason or a fence on a
// new node. A node agent reports what it observes through node_rpc, which
// registers with the leader's own choice of mode. A caller without
// operator:write is held to them by OperatorDecisionsReplaced: on the API
// (host/api checkNodeRegistration) and the node RPC (host/nodeconn) when
// the request arrives, and in the store when it commits.
func (n *Node) OperatorFields() []string {
	var f []string
	if n.Agent {
		f = append(f, "agent")
	}
	if n.RootDir != "" {
		f = append(f, "root_dir")
	}
	if n.Status != "" && n.Status != NodeReady {
		// Ready is what a registration without a status means.
		f = append(f, "status")
	}
	if n.StatusReason != "" {
		f = append(f, "status_reason")
	}
	if !n.StatusSince.IsZero() {
		f = append(f, "status_since")
	}
	if n.HeartbeatLost {
		f = append(f, "heartbeat_lost")
	}
	if n.Fence != nil {
		f = append(f, "fence")
	}
	for id, np := range n.Plugins {
		if np != nil && np.Endpoint != "" {
			f = append(f, "plugins."+id+".endpoint")
		}
	}
	slices.Sort(f)
	return f
}

// RegistrationWay is how a node is registered, which decides what of it
// is the caller's own report.
type RegistrationWay string

const (
	// ThroughAPI: PUT /v1/nodes (`volhost node register`).
	ThroughAPI RegistrationWay = "api"
	// ByItsAgent: a node agent's hello on node_rpc.
	ByItsAgent RegistrationWay = "node_rpc"
)

// Valid reports whether w is a known way ("" is none).
func (w RegistrationWay) Valid() bool { return w == "" || w == ThroughAPI || w == ByItsAgent }

// OperatorDecisionsReplaced says why registering n over old (nil: a new
// node) the given way would make or undo an operator's decision
// (OperatorFields), or "" when it would not, for a caller that may not
// make one. The API, the node RPC and the store at commit all judge a
// registration by it.
//
//   - A node agent's hello reports its own machine's endpoints
//     and root_dir and is registered in agent mode by the leader's choice;
//     it must not take over a node an operator registered in direct mode
//     with endpoints, a root_dir or a status: the node's steps, with its
//     volumes' secrets, would go down the agent's stream.
//   - A registration through the API may set none of them, nor replace a
//     node holding one: a node its agent registered (which would move it
//     to direct mode), or a direct node whose endpoints and root_dir it
//     would drop, or that an operator marked down.
func OperatorDecisionsReplaced(way RegistrationWay, old, n *Node) string {
	var held []string
	if old != nil {
		held = old.OperatorFields()
	}
	if way == ByItsAgent {
		if old == nil || old.Agent || len(held) == 0 {
			return ""
		}
		return "the node is registered in direct mode and holds an operator's " + strings.Join(held, ", ") + "; its agent cannot take it over"
	}
	if set := n.OperatorFields(); len(set) > 0 {
		return "setting " + strings.Join(set, ", ") + " is an operator's decision"
	}
	switch {
	case slices.Contains(held, "agent"):
		return "the node is registered by its node agent; replacing it here would move it to direct mode, an operator's decision"
	case len(held) > 0:
		return "the node holds an operator's " + strings.Join(held, ", ") + "; replacing it here would drop them"
	}
	return ""
}

// WithinRoot reports whether path p lies strictly under directory root,
// where the CO places a node's staging and target paths (csi.Paths): the
// node steps refuse a path outside it, and the store a registration whose
// root_dir does not hold its held claims' paths.
func WithinRoot(root, p string) bool {
	root = filepath.Clean(root)
	return p != root && strings.HasPrefix(p, root+string(filepath.Separator))
}
