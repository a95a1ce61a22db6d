package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/volhost/volhost/host/scheduler"
)

// SchedulerStatusCommand is `volhost scheduler status`.
type SchedulerStatusCommand struct{ *Meta }

func (c *SchedulerStatusCommand) Synopsis() string {
	return "Show the scheduler bridges: connection, index, counts, problems"
}
func (c *SchedulerStatusCommand) Help() string {
	return helpText("scheduler status [options]", `
  Show each scheduler source the agent configuration declares (scheduler
  "nomad" { ... }), as the leader runs it: its connection state, the
  scheduler index committed in volhost's state (where a new leader
  resumes), resets, the allocations it mirrors (live, terminal, and lost
  ones held until their node is fenced), the claims it made, its last
  error, and one line per problem (an unknown volume, a volume already
  claimed for writing, a node volhost does not know).`, true)
}

func (c *SchedulerStatusCommand) Run(args []string) int {
	fs := c.flagSet("scheduler status", true)
	_, cl, ctx, stop, err := c.begin(fs, args, 0, 0, "scheduler status [options]")
	if err != nil {
		return c.fail(err)
	}
	defer stop()
	st, err := cl.SchedulerStatus(ctx)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(st)
	}
	c.Ui.Output(schedulerText(st))
	return 0
}

func schedulerText(sts []scheduler.Status) string {
	if len(sts) == 0 {
		return `No scheduler source (add a scheduler "nomad" { ... } block to the agent configuration)`
	}
	var b strings.Builder
	for i, s := range sts {
		if i > 0 {
			b.WriteString("\n")
		}
		rows := [][]string{
			{"Source", s.Source},
			{"Address", s.Address},
			{"State", s.State},
			{"Index", fmt.Sprint(s.Index)},
			{"Resets", fmt.Sprint(s.Resets)},
			{"Last list", when(s.LastList)},
			{"Last event", when(s.LastEvent)},
			{"Nodes", fmt.Sprint(s.Nodes)},
			{"Allocations", fmt.Sprintf("%d (%d live, %d terminal, %d held)", s.Allocs, s.Live, s.Terminal, s.Held)},
			{"Claims made", fmt.Sprint(s.Claims)},
			{"Last error", orDash(oneLine(s.LastError))},
			{"Failures", fmt.Sprintf("%d since last connected", s.Failures)},
		}
		for _, r := range rows {
			fmt.Fprintf(&b, "%-12s = %s\n", r[0], r[1])
		}
		if len(s.Problems) > 0 {
			b.WriteString("\nProblems\n")
			for _, p := range s.Problems {
				fmt.Fprintf(&b, "  %s  %s\n", p.Since.UTC().Format(time.RFC3339), oneLine(p.Message))
			}
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
