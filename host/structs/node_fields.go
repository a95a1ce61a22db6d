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
// registers with the leader's own choice of mode. The API
// (host/api checkNodeRegistration) and the node RPC (host/nodeconn) both
// hold a caller without operator:write to them.
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

// WithinRoot reports whether path p lies strictly under directory root,
// where the CO places a node's staging and target paths (csi.Paths): the
// node steps refuse a path outside it, and the store a registration whose
// root_dir does not hold its held claims' paths.
func WithinRoot(root, p string) bool {
	root = filepath.Clean(root)
	return p != root && strings.HasPrefix(p, root+string(filepath.Separator))
}
