package attach

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/host/structs"
)

// NodeRelease is the release's half of a node's CSI steps: what the
// watcher sends to undo a claim's node steps (CSI spec: NodeUnpublish
// before NodeUnstage). A direct-mode node service (host/nodestep's
// Executor over host/csi's Client) and a node agent's connection
// (host/nodeconn) both implement it.
type NodeRelease interface {
	NodeUnpublishVolume(ctx context.Context, endpoint string, req *csipb.NodeUnpublishVolumeRequest) error
	NodeUnstageVolume(ctx context.Context, endpoint string, req *csipb.NodeUnstageVolumeRequest) error
}

// NodeSteps is a node's four CSI steps: the claim path's publish
// (NodeStage, NodePublish), its rollback and the release (NodeRelease).
// This is the one declaration of the node-step interface: the claim path,
// the watcher, the node connection and the directory work (host/nodestep)
// all name it.
type NodeSteps interface {
	NodeStageVolume(ctx context.Context, endpoint string, req *csipb.NodeStageVolumeRequest) error
	NodePublishVolume(ctx context.Context, endpoint string, req *csipb.NodePublishVolumeRequest) error
	NodeRelease
}

// NodeAgents reaches the node agents (`volhost agent -client`) connected
// to this server. A node registered through its agent is driven only
// through it: the endpoint a call names is the one the agent registered.
type NodeAgents interface {
	// NodeAgent returns node's connected agent; false when none is.
	NodeAgent(nodeID string) (NodeSteps, bool)
}

// AgentOf says where node's steps go when it registered through a node
// agent: viaAgent is true for such a node, whose plugin endpoints are
// node-local and never dialled from a server, and agent is its connection
// to this server, nil when it is not connected here (the step cannot run
// now). viaAgent false: the node is driven in direct mode, by the
// caller's own node service. agents may be nil (none ever connects).
//
// Both directions route by this one rule: a claim path that published
// through the agent and a release that unstaged through the endpoint
// would reach a path the agent's host/nodestep checks never saw.
func AgentOf(agents NodeAgents, node *structs.Node) (agent NodeSteps, viaAgent bool) {
	if !node.Agent {
		return nil, false
	}
	if agents != nil {
		if a, ok := agents.NodeAgent(node.ID); ok {
			return a, true
		}
	}
	return nil, true
}
