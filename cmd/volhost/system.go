package main

import (
	"fmt"
	"strings"

	"github.com/volhost/volhost/host/api/client"
)

// SystemGCCommand is `volhost system gc`.
type SystemGCCommand struct{ *Meta }

func (c *SystemGCCommand) Synopsis() string { return "Run the claim GC now" }
func (c *SystemGCCommand) Help() string {
	return helpText("system gc [options]", `
  Write the empty "GC claim" for every volume with claims to release now,
  instead of waiting for the periodic claim GC. It bumps those volumes'
  index, which wakes the volume watcher on the leader.`, false)
}

func (c *SystemGCCommand) Run(args []string) int {
	fs := c.flagSet("system gc", false)
	if _, err := c.parse(fs, args, 0, 0, "system gc [options]"); err != nil {
		return c.fail(err)
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	n, err := cl.SystemGC(ctx)
	if err != nil {
		return c.fail(err)
	}
	c.Ui.Output(fmt.Sprintf("Claim GC queued %d volume(s) for release", n))
	return 0
}

// EventsCommand is `volhost events [-index N]`.
type EventsCommand struct{ *Meta }

func (c *EventsCommand) Synopsis() string { return "Show recent events" }
func (c *EventsCommand) Help() string {
	return helpText("events [options]", `
  Show the retained events (claim transitions and failures, stuck volumes,
  forced deregistrations, module events), oldest first.

  -index=<n>
    Only events after raft index n.`, true)
}

func (c *EventsCommand) Run(args []string) int {
	fs := c.flagSet("events", true)
	index := fs.Uint64("index", 0, "")
	if _, err := c.parse(fs, args, 0, 0, "events [options]"); err != nil {
		return c.fail(err)
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	// Only the events after -index, answered now: -index filters here, it
	// does not wait (Wait is tiny; the filter is the same parameter).
	evs, _, err := cl.Events(ctx, &client.QueryOptions{Index: *index, Wait: 1})
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(evs)
	}
	if len(evs) == 0 {
		c.Ui.Output("No events")
		return 0
	}
	rows := [][]string{{"Index", "Time", "Type", "Volume", "Alloc", "Node", "Message"}}
	for _, e := range evs {
		vol := e.VolumeID
		if vol != "" && e.Namespace != "" {
			vol = e.Namespace + "/" + vol
		}
		rows = append(rows, []string{fmt.Sprint(e.Index), fmtTime(e.Time), e.Type, orDash(vol), orDash(e.AllocID), orDash(e.NodeID), oneLine(strings.TrimSpace(e.Message))})
	}
	c.Ui.Output(table(rows))
	return 0
}
