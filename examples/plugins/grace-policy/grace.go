package main

import (
	"fmt"
	"sort"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

// version is reported to the host in the configure response.
const version = "1.0.1"

// defaultGrace applies when the manifest's config sets no grace.
const defaultGrace = 30 * time.Second

// maxGrace bounds the setting: a longer wait is better expressed by not
// stopping the workload, and a typo like "3000h" should fail loudly.
const maxGrace = 24 * time.Hour

// grace is set once per instance by configure.
var grace = defaultGrace

// configure reads `grace`, a Go duration in [0, 24h]; any other key is refused.
func configure(cfg map[string]string) (string, error) {
	g := defaultGrace
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "grace" {
			return version, fmt.Errorf("unknown config key %q (known: grace)", k)
		}
		d, err := time.ParseDuration(cfg[k])
		if err != nil {
			return version, fmt.Errorf("config grace = %q: %w", cfg[k], err)
		}
		if d < 0 || d > maxGrace {
			return version, fmt.Errorf("config grace = %q: must be between 0s and %v", cfg[k], maxGrace)
		}
		g = d
	}
	grace = g
	return version, nil
}

// decide judges each claim:
//   - allocation not terminal: wait, like the default policy;
//   - node down or gone: release now (skipping the node step while the claim
//     is still taken), no grace: the node cannot run the workload again;
//   - allocation terminal for less than the grace period: wait the rest;
//   - otherwise: the default decision.
//
// A terminal allocation whose age the host does not know (TerminalAgeMs 0)
// and an allocation that is gone have no grace left: waiting on an unknown
// age could wait forever.
func decide(req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	ix := defaultpolicy.NewIndex(req)
	graceMs := grace.Milliseconds()
	resp := &abi.PolicyResponse{Decisions: make([]abi.Decision, 0, len(req.Claims))}
	for i := range req.Claims {
		c := &req.Claims[i]
		d := ix.DecideClaim(c)
		status := ix.AllocStatus(c)
		if defaultpolicy.Terminal(status) {
			switch node := ix.NodeStatus(c); node {
			case defaultpolicy.NodeDown, defaultpolicy.NodeGone:
				// The default decision already releases (skipping the node
				// step when the claim is taken).
			default:
				if a := ix.Alloc(c.AllocID); a != nil && status != defaultpolicy.AllocGone && a.TerminalAgeMs > 0 && a.TerminalAgeMs < graceMs {
					d = abi.Decision{
						AllocID: c.AllocID, Action: abi.ActionWait, RetryAfterMs: graceMs - a.TerminalAgeMs,
						// The reason names no age: the host records a hold
						// again whenever its reason changes, so an age in it
						// made every pass a new hold and a new claim-held
						// event, and the hold read "1ms ago" for good. The
						// hold's since and until say when (RetryAfterMs).
						Reason: fmt.Sprintf("allocation %s, grace %v", status, grace),
					}
				}
			}
		}
		resp.Decisions = append(resp.Decisions, d)
	}
	return resp, nil
}
