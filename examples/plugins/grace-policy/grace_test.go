package main

import (
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
)

func TestDecide(t *testing.T) {
	ready := abi.NodeView{ID: "n1", Status: "ready"}
	down := abi.NodeView{ID: "n1", Status: "down"}
	tests := []struct {
		name      string
		grace     time.Duration
		state     string
		alloc     *abi.AllocView
		node      *abi.NodeView
		want      abi.Action
		wantRetry int64
	}{
		{"running waits like default", time.Minute, "taken", &abi.AllocView{ID: "a", ClientStatus: "running"}, &ready, abi.ActionWait, 0},
		{"running on down node still waits", time.Minute, "taken", &abi.AllocView{ID: "a", ClientStatus: "running"}, &down, abi.ActionWait, 0},
		{"within grace waits the rest", time.Minute, "taken", &abi.AllocView{ID: "a", ClientStatus: "complete", TerminalAgeMs: 20_000}, &ready, abi.ActionWait, 40_000},
		{"one ms before grace ends", time.Minute, "taken", &abi.AllocView{ID: "a", ClientStatus: "failed", TerminalAgeMs: 59_999}, &ready, abi.ActionWait, 1},
		{"grace over releases", time.Minute, "taken", &abi.AllocView{ID: "a", ClientStatus: "complete", TerminalAgeMs: 60_000}, &ready, abi.ActionRelease, 0},
		{"node down releases at once skipping node", time.Minute, "taken", &abi.AllocView{ID: "a", ClientStatus: "lost", TerminalAgeMs: 1}, &down, abi.ActionReleaseSkipNode, 0},
		{"node gone (absent) releases at once", time.Minute, "taken", &abi.AllocView{ID: "a", ClientStatus: "complete", TerminalAgeMs: 1}, nil, abi.ActionReleaseSkipNode, 0},
		{"node down past node step releases", time.Minute, "node-detached", &abi.AllocView{ID: "a", ClientStatus: "complete", TerminalAgeMs: 1}, &down, abi.ActionRelease, 0},
		{"unknown age has no grace", time.Minute, "taken", &abi.AllocView{ID: "a", ClientStatus: "complete"}, &ready, abi.ActionRelease, 0},
		{"alloc gone has no grace", time.Minute, "taken", nil, &ready, abi.ActionRelease, 0},
		{"zero grace is the default policy", 0, "taken", &abi.AllocView{ID: "a", ClientStatus: "complete", TerminalAgeMs: 5}, &ready, abi.ActionRelease, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			saved := grace
			t.Cleanup(func() { grace = saved })
			grace = tc.grace
			req := &abi.PolicyRequest{Claims: []abi.ClaimView{{AllocID: "a", NodeID: "n1", State: tc.state}}}
			if tc.alloc != nil {
				req.Allocs = []abi.AllocView{*tc.alloc}
			}
			if tc.node != nil {
				req.Nodes = []abi.NodeView{*tc.node}
			}
			resp, err := decide(req)
			if err != nil || len(resp.Decisions) != 1 {
				t.Fatalf("decide = %+v, %v", resp, err)
			}
			d := resp.Decisions[0]
			if d.AllocID != "a" || d.Action != tc.want || d.RetryAfterMs != tc.wantRetry || d.Reason == "" {
				t.Fatalf("decision %+v, want action %d retry %d", d, tc.want, tc.wantRetry)
			}
		})
	}
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		cfg       map[string]string
		wantGrace time.Duration
		wantErr   string
	}{
		{nil, defaultGrace, ""},
		{map[string]string{"grace": "90s"}, 90 * time.Second, ""},
		{map[string]string{"grace": "0s"}, 0, ""},
		{map[string]string{"grace": "soon"}, defaultGrace, `grace = "soon"`},
		{map[string]string{"grace": "-1s"}, defaultGrace, "between 0s"},
		{map[string]string{"grace": "25h"}, defaultGrace, "between 0s"},
		{map[string]string{"grace": "1s", "mode": "x"}, defaultGrace, `unknown config key "mode"`},
	}
	for _, tc := range tests {
		grace = defaultGrace
		v, err := configure(tc.cfg)
		if v != version || (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("configure(%v) = %q, %v; want error ~%q", tc.cfg, v, err, tc.wantErr)
		}
		if grace != tc.wantGrace {
			t.Errorf("configure(%v): grace %v, want %v (unchanged on error)", tc.cfg, grace, tc.wantGrace)
		}
	}
	grace = defaultGrace
}

// TestWaitReasonIsStable: the reason of a wait does not change as the
// allocation ages. The host writes a hold again (with a claim-held event)
// whenever its reason changes, so a reason naming the age was a new hold
// on every pass, and read "1ms ago" long after.
func TestWaitReasonIsStable(t *testing.T) {
	reason := func(ageMs int64) string {
		req := &abi.PolicyRequest{
			Claims: []abi.ClaimView{{AllocID: "a", NodeID: "n1", State: "taken"}},
			Allocs: []abi.AllocView{{ID: "a", ClientStatus: "complete", TerminalAgeMs: ageMs}},
			Nodes:  []abi.NodeView{{ID: "n1", Status: "ready"}},
		}
		resp, err := decide(req)
		if err != nil || len(resp.Decisions) != 1 || resp.Decisions[0].Action != abi.ActionWait {
			t.Fatalf("decide at age %d ms = %+v, %v; want one wait", ageMs, resp, err)
		}
		return resp.Decisions[0].Reason
	}
	if a, b := reason(1), reason(12_345); a != b {
		t.Fatalf("the wait's reason changes with the allocation's age: %q, then %q", a, b)
	}
}
