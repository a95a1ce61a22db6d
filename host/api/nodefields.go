package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// operatorNodeFields names the fields of a node registration that are an
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
// registers with the leader's own choice of mode.
func operatorNodeFields(n *structs.Node) []string {
	var f []string
	if n.Agent {
		f = append(f, "agent")
	}
	if n.RootDir != "" {
		f = append(f, "root_dir")
	}
	if n.Status != "" && n.Status != structs.NodeReady {
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

// checkNodeRegistration refuses, with ACLs on and a caller without
// operator:write, a registration that sets an operator's field or that
// replaces a node holding one: a node its agent registered (which would
// move it to direct mode), or a direct node its operator registered with
// endpoints and a root_dir, or marked down. A registration replaces the
// whole node, so the second would drop the operator's endpoints and
// root_dir and make a node the operator marked down ready again, three
// operator decisions undone by the node's own token. With ACLs off every
// caller is an operator.
func (s *Server) checkNodeRegistration(r *http.Request, n *structs.Node) error {
	id := identityOf(r)
	if s.auth.cfg == nil || id == nil || id.ACL.Allowed(acl.OperatorWrite, "") {
		return nil
	}
	reason := ""
	if f := operatorNodeFields(n); len(f) > 0 {
		reason = "setting " + strings.Join(f, ", ") + " is an operator's decision"
	} else {
		var held []string
		_, err := s.store.Query(r.Context(), 0, 0, func(_ memdb.WatchSet, rd Reader) (uint64, error) {
			old, err := rd.NodeByID(nil, n.ID)
			if old != nil {
				held = operatorNodeFields(old)
			}
			return 0, err
		})
		if err != nil {
			return fmt.Errorf("read node %q: %w", n.ID, err)
		}
		switch {
		case slices.Contains(held, "agent"):
			reason = "the node is registered by its node agent; replacing it here would move it to direct mode, an operator's decision"
		case len(held) > 0:
			reason = "the node holds an operator's " + strings.Join(held, ", ") + "; replacing it here would drop them"
		}
	}
	if reason == "" {
		return nil
	}
	pd := &PermissionDenied{Capability: acl.OperatorWrite, Node: n.ID,
		Reason: errors.New(reason + "; a node agent reports its node through node_rpc (volhost agent -client)")}
	return &httpError{status: http.StatusForbidden, msg: pd.Error()}
}
