package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/cluster"
)

// RaftDigestCommand is `volhost operator raft digest`.
type RaftDigestCommand struct{ *Meta }

func (c *RaftDigestCommand) Synopsis() string {
	return "Compare every server's replicated state digest"
}
func (c *RaftDigestCommand) Help() string {
	return helpText("operator raft digest [options]", `
  Ask every server of the raft configuration for the digest of its
  replicated state (a SHA-256 of the state store's canonical content and
  the cluster's members, keyring and enabled features; nothing local) once
  it applied the log up to -index (default: the leader's applied index
  now). Servers that applied the same log have the same digest at the same
  command index. Exit code 1 when two servers at the same index differ,
  the servers are at different indexes, or a server does not answer; the runs of RELIABILITY.md end with it.

  -index N
    Wait until each server applied index N (0: the leader's now).`, true)
}

func (c *RaftDigestCommand) Run(args []string) int {
	fs := c.flagSet("operator raft digest", true)
	index := fs.Uint64("index", 0, "")
	if _, err := c.parse(fs, args, 0, 0, "operator raft digest [options]"); err != nil {
		return c.fail(err)
	}
	ctx, stop := c.context()
	defer stop()
	var conf api.RaftConfigurationResponse
	if err := c.operatorJSON(ctx, http.MethodGet, "/v1/operator/raft/configuration", nil, &conf); err != nil {
		return c.fail(err)
	}
	at := *index
	if at == 0 {
		// The leader's own digest names the index the others must reach.
		var d cluster.Digest
		if err := c.operatorJSON(ctx, http.MethodGet, "/v1/operator/raft/digest", nil, &d); err != nil {
			return c.fail(err)
		}
		at = d.AppliedIndex
	}
	base, err := c.client()
	if err != nil {
		return c.fail(err)
	}
	scheme := "http"
	if u, err := url.Parse(base.Address()); err == nil && u.Scheme != "" {
		scheme = u.Scheme
	}
	orig := c.address
	defer func() { c.address = orig }()
	var out []cluster.Digest
	var errs []string
	for _, p := range conf.Servers {
		if p.HTTPAddr == "" {
			errs = append(errs, p.ID+": no HTTP address recorded")
			continue
		}
		c.address = scheme + "://" + p.HTTPAddr
		q := url.Values{"index": {strconv.FormatUint(at, 10)}, "stale": {"true"}}
		var d cluster.Digest
		if err := c.operatorJSON(ctx, http.MethodGet, "/v1/operator/raft/digest", q, &d); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", p.ID, err))
			continue
		}
		out = append(out, d)
	}
	verdict := digestVerdict(out)
	if c.json {
		code := c.printJSON(map[string]any{"index": at, "servers": out, "errors": errs, "verdict": verdict})
		if len(errs) > 0 || !strings.HasPrefix(verdict, "identical") {
			return 1
		}
		return code
	}
	rows := [][]string{{"Server", "Version", "Command Index", "Applied Index", "Digest"}}
	for _, d := range out {
		rows = append(rows, []string{d.Server, d.Build, strconv.FormatUint(d.CommandIndex, 10), strconv.FormatUint(d.AppliedIndex, 10), d.Digest})
	}
	c.Ui.Output(table(rows))
	for _, e := range errs {
		c.Ui.Error("Error: " + e)
	}
	c.Ui.Output(verdict)
	if len(errs) > 0 || !strings.HasPrefix(verdict, "identical") {
		return 1
	}
	return 0
}

// digestVerdict compares digests taken at the same command index.
func digestVerdict(ds []cluster.Digest) string {
	byIndex := map[uint64]map[string][]string{}
	for _, d := range ds {
		if byIndex[d.CommandIndex] == nil {
			byIndex[d.CommandIndex] = map[string][]string{}
		}
		byIndex[d.CommandIndex][d.Digest] = append(byIndex[d.CommandIndex][d.Digest], d.Server)
	}
	for idx, m := range byIndex {
		if len(m) > 1 {
			var parts []string
			for dg, servers := range m {
				parts = append(parts, strings.Join(servers, ",")+"="+dg[:12])
			}
			return fmt.Sprintf("DIVERGED at command index %d: %s", idx, strings.Join(parts, " "))
		}
	}
	if len(byIndex) > 1 {
		return "INCONCLUSIVE: servers are at different command indexes (writes went on): run again to compare at one index"
	}
	return fmt.Sprintf("identical: %d servers", len(ds))
}
