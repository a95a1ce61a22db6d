package main

import (
	"context"
	"fmt"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/structs"
)

// AllocRegisterCommand is `volhost alloc register FILE`.
type AllocRegisterCommand struct{ *Meta }

func (c *AllocRegisterCommand) Synopsis() string { return "Register allocations from a spec file" }
func (c *AllocRegisterCommand) Help() string {
	return helpText("alloc register [options] FILE", `
  Register (or update) the allocations described in FILE (HCL, or HCL's
  JSON syntax), one or more alloc blocks. volhost does not schedule: the
  scheduler (or you) reports allocations and their client status.

    alloc "web-1" {
      namespace     = "default"   # optional
      node_id       = "node1"
      job_id        = "web"       # optional
      client_status = "running"   # optional: pending, running (default),
                                  # complete, failed, lost
    }`, false)
}

func (c *AllocRegisterCommand) Run(args []string) int {
	return registerFile(c.Meta, "alloc", args, loadAllocs, func(ctx context.Context, cl *client.Client, allocs []*structs.Alloc) error {
		if _, err := cl.UpsertAllocs(ctx, allocs); err != nil {
			return err
		}
		for _, a := range allocs {
			c.Ui.Output(fmt.Sprintf("Registered allocation %q on node %q (%s)", a.ID, a.NodeID, a.ClientStatus))
		}
		return nil
	})
}

// AllocUpdateCommand is `volhost alloc update -status S ID`.
type AllocUpdateCommand struct{ *Meta }

func (c *AllocUpdateCommand) Synopsis() string { return "Update an allocation's client status" }
func (c *AllocUpdateCommand) Help() string {
	return helpText("alloc update [options] -status STATUS ID", `
  Set allocation ID's client status. Once it is terminal (complete,
  failed, lost) the volume watcher releases the allocation's claims.

  -status=<status>
    pending, running, complete, failed or lost (required).`, false)
}

func (c *AllocUpdateCommand) Run(args []string) int {
	fs := c.flagSet("alloc update", false)
	status := fs.String("status", "", "")
	rest, err := c.parse(fs, args, 1, 1, "alloc update [options] -status STATUS ID")
	if err != nil {
		return c.fail(err)
	}
	st := structs.AllocClientStatus(*status)
	if !st.Valid() {
		return c.fail(badChoice("-status", *status, structs.AllocClientStatuses...))
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	a, _, err := cl.Alloc(ctx, rest[0], nil)
	if err != nil {
		return c.fail(err)
	}
	a.ClientStatus = st
	if _, err := cl.UpsertAllocs(ctx, []*structs.Alloc{a}); err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Allocation %q is now %s", a.ID, st))
	return 0
}

// AllocStatusCommand is `volhost alloc status [ID]`.
type AllocStatusCommand struct{ *Meta }

func (c *AllocStatusCommand) Synopsis() string { return "Show allocations, or one allocation" }
func (c *AllocStatusCommand) Help() string {
	return helpText("alloc status [options] [ID]", `
  Without ID, list the allocations. With ID, show one. An allocation is
  read like the volumes of its namespace: the list of every namespace
  needs read on every namespace.

  -namespace=<ns>
    Only list this namespace's allocations; with ID, the allocation's
    namespace. Overrides the VOLHOST_NAMESPACE environment variable.
    Default: every namespace (with ID: the one it is in).

  -node=<id>
    Only list allocations on this node.`, true)
}

func (c *AllocStatusCommand) Run(args []string) int {
	fs := c.flagSet("alloc status", true)
	node := fs.String("node", "", "")
	ns := c.namespaceFlag(fs, "")
	rest, cl, ctx, stop, err := c.begin(fs, args, 0, 1, "alloc status [options] [ID]")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	if len(rest) == 0 {
		allocs, _, err := cl.AllocsWhere(ctx, client.AllocQuery{Namespace: *ns, NodeID: *node}, nil)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(allocs)
		}
		if len(allocs) == 0 {
			c.Ui.Output("No allocations")
			return 0
		}
		rows := [][]string{{"ID", "Namespace", "Node ID", "Job ID", "Client Status"}}
		for _, a := range allocs {
			rows = append(rows, []string{a.ID, a.Namespace, a.NodeID, orDash(a.JobID), string(a.ClientStatus)})
		}
		c.Ui.Output(table(rows))
		return 0
	}
	a, _, err := cl.AllocIn(ctx, *ns, rest[0], nil)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(a)
	}
	c.Ui.Output(kv([][2]string{
		{"ID", a.ID},
		{"Namespace", a.Namespace},
		{"Node ID", a.NodeID},
		{"Job ID", orDash(a.JobID)},
		{"Client Status", string(a.ClientStatus)},
		{"Modify Time", fmtTime(a.ModifyTime)},
	}))
	return 0
}
