package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/structs"
)

// NodeRegisterCommand is `volhost node register FILE`.
type NodeRegisterCommand struct{ *Meta }

func (c *NodeRegisterCommand) Synopsis() string { return "Register nodes from a spec file" }
func (c *NodeRegisterCommand) Help() string {
	return helpText("node register [options] FILE", `
  Register (or update) the nodes described in FILE (HCL, or HCL's JSON
  syntax), one or more node blocks:

    node "node1" {
      status   = "ready"               # optional: ready (default) or down
      root_dir = "/var/lib/volhost"    # staging and target paths go under it
      meta     = { rack = "r1" }       # optional

      plugin "gce-pd" {                # one block per CSI node plugin
        endpoint = "unix:///run/csi/gce-pd.sock"
      }
    }

  The agent calls NodeGetInfo on each plugin endpoint and records the
  external node ID and capabilities it reports.`, false)
}

func (c *NodeRegisterCommand) Run(args []string) int {
	return registerFile(c.Meta, "node", args, loadNodes, func(ctx context.Context, cl *client.Client, nodes []*structs.Node) error {
		for _, n := range nodes {
			got, err := cl.RegisterNode(ctx, n)
			if err != nil {
				return fmt.Errorf("node %q: %w", n.ID, err)
			}
			c.Ui.Output(fmt.Sprintf("Registered node %q (%s, %d plugin(s))", got.ID, got.Status, len(got.Plugins)))
		}
		return nil
	})
}

// NodeStatusCommand is `volhost node status [ID]`.
type NodeStatusCommand struct{ *Meta }

func (c *NodeStatusCommand) Synopsis() string { return "Show nodes, or one node" }
func (c *NodeStatusCommand) Help() string {
	return helpText("node status [options] [ID]", `
  Without ID, list the nodes. With ID, show the node and its CSI node
  plugins (endpoint, external node ID, capabilities).`, true)
}

func (c *NodeStatusCommand) Run(args []string) int {
	fs := c.flagSet("node status", true)
	rest, cl, ctx, stop, err := c.begin(fs, args, 0, 1, "node status [options] [ID]")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	if len(rest) == 0 {
		nodes, _, err := cl.Nodes(ctx, nil)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(nodes)
		}
		if len(nodes) == 0 {
			c.Ui.Output("No nodes")
			return 0
		}
		rows := [][]string{{"ID", "Status", "Plugins", "Last Seen"}}
		for _, n := range nodes {
			rows = append(rows, []string{n.ID, n.DisplayStatus(), orDash(strings.Join(pluginIDs(n), ", ")), fmtTime(n.LastSeen)})
		}
		c.Ui.Output(table(rows))
		return 0
	}
	n, _, err := cl.Node(ctx, rest[0], nil)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(n)
	}
	c.Ui.Output(kv([][2]string{
		{"ID", n.ID},
		{"Status", n.DisplayStatus()},
		{"Status Reason", orDash(n.StatusReason)},
		{"Node Agent", agentText(n)},
		{"Fence", fenceText(n.Fence)},
		{"Root Dir", orDash(n.RootDir)},
		{"Last Seen", fmtTime(n.LastSeen)},
	}))
	c.Ui.Output("\nPlugins")
	if len(n.Plugins) == 0 {
		c.Ui.Output("No plugins")
		return 0
	}
	rows := [][]string{{"Plugin ID", "Endpoint", "External Node ID", "Stage/Unstage", "Max Volumes", "Probe"}}
	for _, id := range pluginIDs(n) {
		p := n.Plugins[id]
		rows = append(rows, []string{id, p.Endpoint, orDash(p.ExternalNodeID), fmt.Sprint(p.StageUnstage), fmt.Sprint(p.MaxVolumes), probeText(p)})
	}
	c.Ui.Output(table(rows))
	return 0
}

// probeText is how a node plugin answered its agent's last probe: "ok",
// or "failed: " and why (the other columns are then what it last
// answered).
func probeText(p *structs.NodePlugin) string {
	if p.Answering() {
		return "ok"
	}
	return "failed: " + p.ProbeError
}

func pluginIDs(n *structs.Node) []string {
	return slices.Sorted(maps.Keys(n.Plugins))
}

// NodeSetStatusCommand is `volhost node set-status ID ready|down`.
type NodeSetStatusCommand struct{ *Meta }

func (c *NodeSetStatusCommand) Synopsis() string { return "Mark a node ready or down" }
func (c *NodeSetStatusCommand) Help() string {
	return helpText("node set-status [options] ID ready|down", `
  Set a node's status. Claims on a down node skip the node release step
  (the default policy), so their volumes are not held by a node that will
  never answer.`, false)
}

func (c *NodeSetStatusCommand) Run(args []string) int {
	fs := c.flagSet("node set-status", false)
	rest, err := c.parse(fs, args, 2, 2, "node set-status [options] ID ready|down")
	if err != nil {
		return c.fail(err)
	}
	st := structs.NodeStatus(rest[1])
	if !st.Valid() {
		return c.fail(badChoice("STATUS", rest[1], structs.NodeReady, structs.NodeDown))
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	if _, err := cl.SetNodeStatus(ctx, rest[0], st); err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Node %q is now %s", rest[0], st))
	return 0
}

func agentText(n *structs.Node) string {
	if !n.Agent {
		return "none (direct mode: the leader dials the plugin endpoints)"
	}
	return "yes (node steps go through the node agent)"
}

func fenceText(f *structs.NodeFence) string {
	if f == nil {
		return "-"
	}
	if f.ByModule() {
		return fmt.Sprintf("%s, confirmed by adapter module %s at %s", f.Reason, strings.TrimPrefix(f.Source, "module:"), fmtTime(f.Time))
	}
	return fmt.Sprintf("%s by %s (%s) at %s", f.Reason, f.Source, f.Accessor, fmtTime(f.Time))
}

// NodeFenceCommand is `volhost node fence -reason TEXT ID`.
type NodeFenceCommand struct{ *Meta }

func (c *NodeFenceCommand) Synopsis() string { return "Attest that a lost node is off" }
func (c *NodeFenceCommand) Help() string {
	return helpText("node fence [options] -reason TEXT ID", `
  Record that you know node ID is off (powered off, terminated, isolated).
  Claims on a fenced node skip their node steps (NodeUnpublish,
  NodeUnstage) and go straight to the controller step, so a volume held by
  a lost node can be attached elsewhere; the claim, the event and the
  metric volhost_forced_detaches_total carry the reason. volhost never
  does this on a timeout alone: a node that is only slow or partitioned
  may still write to the volume (Kubernetes #120344).

  A fenced node that heartbeats again is shown as "fenced, heartbeating"
  and takes no new claim until 'volhost node unfence'.

  A csi-adapter module exporting volhost_confirm_fence (ABI 1.1) may fence
  a heartbeat-lost node itself, for instance from a list of terminated
  instances in its config; 'volhost node status' then shows the fence as
  "confirmed by adapter module NAME@VERSION", and 'node unfence' lifts it
  the same way.

  -reason TEXT   why the node is known to be off (required)`, false)
}

func (c *NodeFenceCommand) Run(args []string) int {
	fs := c.flagSet("node fence", false)
	reason := fs.String("reason", "", "why the node is known to be off")
	rest, err := c.parse(fs, args, 1, 1, "node fence [options] -reason TEXT ID")
	if err != nil {
		return c.fail(err)
	}
	if strings.TrimSpace(*reason) == "" {
		return c.fail(fmt.Errorf("-reason is required: say why node %q is known to be off", rest[0]))
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	if _, err := cl.FenceNode(ctx, rest[0], *reason); err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Node %q fenced: %s", rest[0], *reason))
	return 0
}

// NodeUnfenceCommand is `volhost node unfence ID`.
type NodeUnfenceCommand struct{ *Meta }

func (c *NodeUnfenceCommand) Synopsis() string { return "Lift a node's fence" }
func (c *NodeUnfenceCommand) Help() string {
	return helpText("node unfence [options] ID", `
  Lift the fence of node ID: its claims go through their node steps
  again, and once it heartbeats it takes new claims.`, false)
}

func (c *NodeUnfenceCommand) Run(args []string) int {
	fs := c.flagSet("node unfence", false)
	rest, cl, ctx, stop, err := c.begin(fs, args, 1, 1, "node unfence [options] ID")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	if _, err := cl.UnfenceNode(ctx, rest[0]); err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Node %q unfenced", rest[0]))
	return 0
}

// NodeDeregisterCommand is `volhost node deregister [-force] ID`.
type NodeDeregisterCommand struct{ *Meta }

func (c *NodeDeregisterCommand) Synopsis() string { return "Remove a retired node" }
func (c *NodeDeregisterCommand) Help() string {
	return helpText("node deregister [options] ID", `
  Remove node ID from the cluster state, as the reference scheduler's
  "node purge" does. Refused while an allocation on the node runs, naming
  the allocations. Refused too while claims of ended allocations are still
  on the node, naming them: wait for their release, or use -force.

  Stop the node's agent first: an agent that still runs registers the node
  again on its next connection.

  -force
    Deregister even with claims still on the node. Those claims then skip
    their node steps (NodeUnpublish, NodeUnstage: nothing is unmounted
    there) and go to the controller step; the command lists them. Use it
    only when the node is off or no longer mounts the volumes, as for
    'volhost node fence'.`, false)
}

func (c *NodeDeregisterCommand) Run(args []string) int {
	fs := c.flagSet("node deregister", false)
	force := fs.Bool("force", false, "")
	rest, cl, ctx, stop, err := c.begin(fs, args, 1, 1, "node deregister [options] ID")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	resp, err := cl.DeregisterNode(ctx, rest[0], *force)
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Deregistered node %q", rest[0]))
	if len(resp.SkippedNodeSteps) > 0 {
		rows := [][]string{{"Namespace", "Volume", "Alloc ID", "State"}}
		for _, cl := range resp.SkippedNodeSteps {
			rows = append(rows, []string{cl.Namespace, cl.VolumeID, cl.AllocID, string(cl.State)})
		}
		c.Ui.Output(fmt.Sprintf("\n%d claim(s) will skip their node steps (nothing is unmounted on the node):\n%s",
			len(resp.SkippedNodeSteps), table(rows)))
	}
	return 0
}
