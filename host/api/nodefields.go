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
	if f := n.OperatorFields(); len(f) > 0 {
		reason = "setting " + strings.Join(f, ", ") + " is an operator's decision"
	} else {
		var held []string
		_, err := s.store.Query(r.Context(), 0, 0, func(_ memdb.WatchSet, rd Reader) (uint64, error) {
			old, err := rd.NodeByID(nil, n.ID)
			if old != nil {
				held = old.OperatorFields()
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
