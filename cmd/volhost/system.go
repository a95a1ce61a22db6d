package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/structs"
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
	_, cl, ctx, stop, err := c.begin(fs, args, 0, 0, "system gc [options]")
	if err != nil {
		return c.fail(err)
	}
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
  forced deregistrations, module events, the audit trail), oldest first,
  every page of them. Each volume keeps its own most recent events
  (events.per_volume), so a flood of claims on one volume never evicts
  another's history; audit events are kept apart (events.audit).

  -index=<n>
    Only events after raft index n.

  -volume=<id>
    Only the events of this volume (in -namespace, default "default").

  -namespace=<ns>
    The namespace of -volume (only with -volume: events are filtered by
    volume, not by namespace).

  -type=<type>
    Only events of this type, one of
    `+wrap(strings.Join(structs.EventTypes, ", "), 70, "    ")+`.

  -since=<time>, -until=<time>
    Only events at or after, and before, a time: RFC 3339
    (2026-12-01T10:00:00Z) or a duration ago (1h).

  -follow
    Keep printing new events as they are recorded (blocking queries on the
    events table) until interrupted.`, true)
}

func (c *EventsCommand) Run(args []string) int {
	fs := c.flagSet("events", true)
	index := fs.Uint64("index", 0, "")
	follow := fs.Bool("follow", false, "")
	volume := fs.String("volume", "", "")
	ns := fs.String("namespace", "", "")
	typ := fs.String("type", "", "")
	since := fs.String("since", "", "")
	until := fs.String("until", "", "")
	if _, err := c.parse(fs, args, 0, 0, "events [options]"); err != nil {
		return c.fail(err)
	}
	// Checked here, not only by the agent: an unknown type or a namespace
	// without a volume would otherwise be refused only after connecting,
	// and the client drops a namespace without a volume silently.
	if *typ != "" && !structs.ValidEventType(*typ) {
		return c.fail(badChoice("-type", *typ, structs.EventTypes...))
	}
	if *ns == "" && *volume != "" && c.Env != nil {
		// VOLHOST_NAMESPACE names -volume's namespace; without -volume the
		// events of every namespace are shown, whatever it says.
		*ns = c.Env(envNamespace)
	}
	if *ns != "" && *volume == "" {
		return c.fail(fmt.Errorf("-namespace filters only with -volume (the namespace of that volume)"))
	}
	eq := client.EventQuery{Namespace: *ns, VolumeID: *volume, Type: *typ}
	for name, p := range map[string]struct {
		v   string
		dst *time.Time
	}{"since": {*since, &eq.After}, "until": {*until, &eq.Before}} {
		if p.v == "" {
			continue
		}
		t, err := parseWhen(p.v, time.Now())
		if err != nil {
			return c.fail(fmt.Errorf("-%s: %w", name, err))
		}
		*p.dst = t
	}
	cl, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	// Only the events after -index, answered now: -index filters here, it
	// does not wait (Wait is tiny; the filter is the same parameter).
	evs, meta, err := cl.EventsFiltered(ctx, eq, &client.QueryOptions{Index: *index, Wait: 1})
	if err != nil {
		return c.fail(err)
	}
	if !*follow {
		if c.json {
			return c.printJSON(evs)
		}
		if len(evs) == 0 {
			c.Ui.Output("No events")
			return 0
		}
		c.Ui.Output(table(append([][]string{eventHeader}, eventRows(evs)...)))
		return 0
	}
	// Follow: print what exists, then block for what comes next. Columns
	// are fixed-width-free (tab separated) since rows arrive over time.
	c.printEvents(evs, true)
	last := max(*index, meta.Index)
	for _, e := range evs {
		last = max(last, e.Index)
	}
	for {
		evs, _, err := cl.EventsFiltered(ctx, eq, &client.QueryOptions{Index: last, Wait: 5 * time.Minute})
		if err != nil {
			if ctx.Err() != nil {
				return 0 // interrupted: the normal way to stop following
			}
			return c.fail(err)
		}
		c.printEvents(evs, false)
		for _, e := range evs {
			last = max(last, e.Index)
		}
	}
}

var eventHeader = []string{"Index", "Time", "Type", "Volume", "Alloc", "Node", "Message"}

func eventRows(evs []*structs.Event) [][]string {
	rows := make([][]string, 0, len(evs))
	for _, e := range evs {
		vol := e.VolumeID
		if vol != "" && e.Namespace != "" {
			vol = e.Namespace + "/" + vol
		}
		rows = append(rows, []string{fmt.Sprint(e.Index), fmtTime(e.Time), e.Type, orDash(vol), orDash(e.AllocID), orDash(e.NodeID), oneLine(strings.TrimSpace(e.Message))})
	}
	return rows
}

// printEvents prints followed events one per line (JSON lines with -json).
func (c *EventsCommand) printEvents(evs []*structs.Event, header bool) {
	if c.json {
		for _, e := range evs {
			b, err := json.Marshal(e)
			if err == nil {
				c.Ui.Output(string(b))
			}
		}
		return
	}
	if header {
		c.Ui.Output(strings.Join(eventHeader, "\t"))
	}
	for _, r := range eventRows(evs) {
		c.Ui.Output(strings.Join(r, "\t"))
	}
}

// wrap breaks s into lines of at most width columns, each after the
// first starting with indent (help text lists).
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if line+1+len(word) > width {
				b.WriteString("\n" + indent)
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// parseWhen reads an RFC 3339 time or a duration ago ("1h": an hour
// before now).
func parseWhen(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-12-01T10:00:00Z) nor a duration ago (1h)", v)
}
