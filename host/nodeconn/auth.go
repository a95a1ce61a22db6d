package nodeconn

import (
	"context"
	"fmt"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// ACLAuth is the Authorizer of a cluster with ACLs on: an agent's token
// must grant node:write on the node it serves through a node_id rule
// naming it (or a glob), or be a management token (acl.ACL.ServesNode),
// so a token handed to one node cannot drive another, a node block's
// node:write (the API's) drives none, and it stops serving the moment
// the token is deleted or expires, or a policy change takes that grant
// away.
func ACLAuth(r *acl.Resolver) Authorizer { return aclAuth{r} }

type aclAuth struct{ r *acl.Resolver }

func (x aclAuth) Authorize(_ context.Context, token, nodeID string) error {
	id, err := x.r.Resolve(token)
	if err != nil {
		return err
	}
	return mayServe(id, nodeID)
}

func (x aclAuth) Revoked(ctx context.Context, token, nodeID string) <-chan error {
	return x.r.WatchRevocation(ctx, token, func(id *acl.Identity) error { return mayServe(id, nodeID) })
}

// AccessorOf is the accessor of token's ACL token
// (structs.AnonymousAccessor for none: the anonymous policy is judged at
// commit as a token's), recorded on the node it registers.
func (x aclAuth) AccessorOf(token string) (string, error) {
	id, err := x.r.Resolve(token)
	if err != nil {
		return "", err
	}
	return id.Accessor(), nil // structs.AnonymousAccessor without a token
}

// MayOperate: token grants operator:write (host/nodeconn keepOperatorNode).
func (x aclAuth) MayOperate(token string) (bool, error) {
	id, err := x.r.Resolve(token)
	if err != nil {
		return false, err
	}
	return id.ACL != nil && id.ACL.Allowed(acl.OperatorWrite, ""), nil
}

// mayServe is the one rule of who may be nodeID's agent.
func mayServe(id *acl.Identity, nodeID string) error {
	if id.ACL == nil || !id.ACL.ServesNode(nodeID) {
		return fmt.Errorf("token %s does not grant %s on node %q through a node_id rule naming it (a node block's grant is the API's, not a node agent's): %w",
			id.Accessor(), acl.NodeWrite, nodeID, structs.ErrPermissionDenied)
	}
	return nil
}
