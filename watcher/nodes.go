package watcher

import (
	"context"
	"fmt"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// Node agents, fences and lost heartbeats.
//
// A node registered by its node agent is reached only through the agent's
// connection: its plugin endpoints are node-local. A node whose agent
// stopped heartbeating is down (later gone) on a timeout, and a timeout
// never lets a claim skip its node steps: a slow or partitioned node may
// still write to the volume, and detaching it there corrupts data
// (Kubernetes #120344). Only a fence, an operator's (or a module's)
// attestation that the node is off, does; the claim and the metric carry
// its reason.

// ForcedDetachMetrics is optionally implemented by a Metrics to count
// claims whose node steps were skipped because their node is fenced.
// source is "operator" or "module" (bounded label values; the free-text
// reason goes to the claim and the event).
type ForcedDetachMetrics interface {
	ForcedDetach(source string)
}

// AbandonReason* say why a claim was abandoned without its CSI calls,
// after AbandonAfter attempts (Nomad #25349, #16728: such claims retried
// forever, restarting on every leader change).
const (
	AbandonPluginGone = "plugin %q is no longer registered"
	AbandonNodeGone   = "node %q is gone and no external node ID is known"
)

// HostHolder names the host as the holder of a claim it keeps waiting.
const HostHolder = "volhost"

// fence is the fence of a claim's node, nil when it is not fenced.
func (p *pass) fence(nodeID string) *structs.NodeFence {
	if n := p.nodes[nodeID]; n != nil {
		return n.Fence
	}
	return nil
}

// heartbeatLost: the node is down or gone because its agent stopped
// heartbeating, and nobody has fenced it.
func (p *pass) heartbeatLost(nodeID string) bool {
	n := p.nodes[nodeID]
	return n != nil && n.HeartbeatLost && n.Status != structs.NodeReady && n.Fence == nil
}

// lostHeartbeatHold is the verdict for a policy that would skip the node
// step of a node that only missed heartbeats: wait, visibly, for the node
// to come back or for an operator to fence it.
func (p *pass) lostHeartbeatHold(c *structs.Claim) verdict {
	n := p.nodes[c.NodeID]
	since := n.StatusSince
	if since.IsZero() {
		since = n.LastSeen
	}
	return verdict{action: abi.ActionWait, hostHold: true, reason: fmt.Sprintf(
		"node %s is %s since %s (%s): its node steps are skipped only once an operator attests it is off with `volhost node fence`",
		c.NodeID, n.Status, since.UTC().Format(time.RFC3339), orText(n.StatusReason, "missed heartbeats"))}
}

// unansweredHold is the verdict for a claim whose node steps would go
// through a node plugin that did not answer its agent's last probe. The
// store keeps the machine that plugin last answered for (host/state
// node_answers.go), but nothing says the agent now registered under the
// node's ID reaches that machine: an agent of another machine under the
// same ID would get NodeUnpublish and NodeUnstage of paths its own
// allocations use. The steps wait, visibly, until the plugin answers, and
// its registration shows which machine it is (a registration that moves
// a held claim's machine is refused).
func (p *pass) unansweredHold(c *structs.Claim) (verdict, bool) {
	if c.State.Order() >= structs.ClaimNodeDetached.Order() || (c.TargetPath == "" && c.StagingPath == "") {
		return verdict{}, false // no node step left
	}
	n := p.nodes[c.NodeID]
	if n == nil {
		return verdict{}, false
	}
	np := n.Plugins[p.v.PluginID]
	if np == nil || np.Answering() {
		return verdict{}, false
	}
	return verdict{action: abi.ActionWait, hostHold: true, reason: unansweredWait(c.NodeID, p.v.PluginID, np)}, true
}

// unansweredWait says why a claim's node steps wait for np, a plugin that
// did not answer its agent's probe: the hold's reason (unansweredHold)
// and the node step's refusal (nodeStep) alike.
func unansweredWait(nodeID, pluginID string, np *structs.NodePlugin) string {
	return fmt.Sprintf("node %q's plugin %q did not answer its node agent's last probe (%s): its node steps wait until it answers as the machine the claim was published on",
		nodeID, pluginID, np.ProbeError)
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// nodeService is where a claim's node steps go (attach.AgentOf): the
// node's agent when it registered through one (and nowhere while that
// agent is not connected to this server), else the plugin endpoint
// directly.
func (p *pass) nodeService(node *structs.Node, step string) (attach.NodeRelease, *structs.ClaimError) {
	a, viaAgent := attach.AgentOf(p.w.deps.Agents, node)
	switch {
	case !viaAgent:
		return p.w.deps.Node, nil
	case a == nil:
		return nil, p.precondition(step, "the node agent of node %q is not connected to this server (node %s)", node.ID, node.Status)
	}
	return a, nil
}

// abandonReason says why no CSI call can ever release claim c, or "".
func (p *pass) abandonReason(c *structs.Claim) string {
	if p.plugin == nil {
		return fmt.Sprintf(AbandonPluginGone, p.v.PluginID)
	}
	n := p.nodes[c.NodeID]
	if n != nil && n.Status != structs.NodeGone {
		return ""
	}
	if c.ExternalNodeID != "" {
		return ""
	}
	if n != nil {
		if np := n.Plugins[p.v.PluginID]; np != nil && np.ExternalNodeID != "" {
			return ""
		}
	}
	return fmt.Sprintf(AbandonNodeGone, c.NodeID)
}

// abandon moves a claim that nothing can release past its CSI steps with a
// note saying why; the transition events carry it. It is one checkpoint:
// the attempts that led here were counted on the claim, committed, so a
// new leader continues the count instead of restarting it.
func (p *pass) abandon(ctx context.Context, c *structs.Claim, reason string) error {
	note := p.precondition(StepControllerUnpublish, "claim abandoned after %d attempts without its CSI calls: %s", c.Attempts, reason)
	note.Time = p.now
	p.log.Warn("abandoning claim", "alloc", c.AllocID, "node", c.NodeID, "attempts", c.Attempts, "reason", reason)
	return p.advance(ctx, c, structs.ClaimControllerDetached, note, stepFlags{})
}

// forcedDetach counts a node step skipped because the node is fenced.
func (p *pass) forcedDetach(f *structs.NodeFence) {
	m, ok := p.w.metrics.(ForcedDetachMetrics)
	if !ok {
		return
	}
	source := "operator"
	if f.Source != "operator" {
		source = "module"
	}
	m.ForcedDetach(source)
}

// stepNode is the node a claim's node steps go to: its own node, or, when
// that node is no longer registered, the node registered on the machine
// the claim was published to (structs.Machine: the volume's plugin and the
// external node ID recorded on the claim). A node deregistered or
// collected whose machine came back under another node ID is not gone:
// its staging path and target are still mounted there, and skipping its
// node steps as if the machine had vanished leaves them mounted, after
// which ControllerUnpublish detaches the disk under them. Likewise a node
// registered under the claim's node ID that reports another external node
// ID for the plugin is another machine (the store refuses such a
// registration while the claim is held; a state from before that rule may
// have one): its steps would unstage a path under that machine's own
// allocations. The claim keeps its node ID; only where its steps run
// changes. nil: gone.
func stepNode(st StateReader, v *structs.Volume, c *structs.Claim) (*structs.Node, error) {
	n, err := st.Node(c.NodeID)
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", c.NodeID, err)
	}
	if c.ExternalNodeID == "" || (n != nil && !otherMachine(n, v.PluginID, c.ExternalNodeID)) {
		return n, nil
	}
	m := structs.Machine{PluginID: v.PluginID, ExternalNodeID: c.ExternalNodeID}
	if n, err = st.NodeOfMachine(m); err != nil {
		return nil, fmt.Errorf("read the node on %s: %w", m, err)
	}
	return n, nil
}

// otherMachine: node n reports, for plugin pluginID, an external node ID
// other than ext. A plugin reported with no ID (its endpoint away) is not
// another machine: the claim's steps wait for the endpoint there.
func otherMachine(n *structs.Node, pluginID, ext string) bool {
	np := n.Plugins[pluginID]
	return np != nil && np.ExternalNodeID != "" && np.ExternalNodeID != ext
}

// nodeName names where a claim's node steps go: a node's ID, or "gone".
func nodeName(n *structs.Node) string {
	if n == nil {
		return "gone"
	}
	return "node " + n.ID
}
