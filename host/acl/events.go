package acl

import "github.com/volhost/volhost/host/structs"

// AllowedEvent reports whether a may see event e, on top of events:read
// (the route's gate): events carry what their subject's own reads would
// show, so each is read like its subject, as Nomad's event stream checks
// each topic against the ACL of what it is about.
//
//   - audit events (privileged actions, who did them): operator:read.
//     Nomad and Consul keep their audit logs out of the API altogether
//     (a file on the server); here they are readable, but only by whom
//     may read the cluster's operations.
//   - an event of a volume (it names a namespace): namespace:read there.
//   - an event of a node (node-status, node-fence): node:read on it.
//   - a module event: modules:read.
//   - anything else: operator:read (fail closed for a new event type).
func (a *ACL) AllowedEvent(e *structs.Event) bool {
	if a.management {
		return true
	}
	switch {
	case e.Type == structs.EventAudit:
		return a.Allowed(OperatorRead, "")
	case e.Namespace != "":
		return a.Allowed(NamespaceRead, e.Namespace)
	case e.Type == structs.EventNodeStatus || e.Type == structs.EventNodeFence:
		return a.AllowedNode(NodeRead, e.NodeID)
	case e.Type == structs.EventModule:
		return a.Allowed(ModulesRead, "")
	}
	return a.Allowed(OperatorRead, "")
}
