package api

import (
	"errors"
	"fmt"
	"net/http"

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
	var old *structs.Node
	_, err := s.store.Query(r.Context(), 0, 0, func(_ memdb.WatchSet, rd Reader) (uint64, error) {
		var err error
		old, err = rd.NodeByID(nil, n.ID)
		return 0, err
	})
	if err != nil {
		return fmt.Errorf("read node %q: %w", n.ID, err)
	}
	// The store judges it again at commit (NodeUpsertRequest.HoldOperatorFields):
	// this answer is the early one, with the 403 the API gives.
	reason := structs.OperatorDecisionsReplaced(structs.ThroughAPI, old, n)
	if reason == "" {
		return nil
	}
	pd := &PermissionDenied{Capability: acl.OperatorWrite, Node: n.ID,
		Reason: errors.New(reason + "; a node agent reports its node through node_rpc (volhost agent -client)")}
	return &httpError{status: http.StatusForbidden, msg: pd.Error()}
}
