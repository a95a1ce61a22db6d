package plugins

import (
	"fmt"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
)

// TestCheckPolicyResponse covers the answer checks on both sides of the
// 64-claim switch from the bit set to the index (issue 17).
func TestCheckPolicyResponse(t *testing.T) {
	decision := func(alloc string) abi.Decision {
		return abi.Decision{AllocID: alloc, Action: abi.ActionRelease}
	}
	for _, n := range []int{2, 8, 64, 65, 200} {
		req := volumeRequest(n)
		last := fmt.Sprintf("alloc-%d", n-1)
		all := make([]abi.Decision, n)
		for i := range all {
			all[i] = decision(req.Claims[i].AllocID)
		}
		cases := []struct {
			name      string
			decisions []abi.Decision
			want      string // "" for valid
		}{
			{"none", nil, ""},
			{"every claim", all, ""},
			{"the last claim", []abi.Decision{decision(last)}, ""},
			{"unknown alloc", []abi.Decision{decision("alloc-x")}, `decision for alloc "alloc-x", which is not a claim`},
			{"two for the last claim", []abi.Decision{decision(last), decision(last)}, fmt.Sprintf("two decisions for alloc %q", last)},
			{"more than claims", append(all[:n:n], decision(last)), fmt.Sprintf("%d decisions for %d claims", n+1, n)},
			{"unknown action", []abi.Decision{{AllocID: last, Action: 7}}, "unknown action 7"},
			{"negative wait", []abi.Decision{{AllocID: last, Action: abi.ActionWait, RetryAfterMs: -1}}, "negative retry_after_ms -1"},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%d claims/%s", n, tc.name), func(t *testing.T) {
				err := checkPolicyResponse(req, &abi.PolicyResponse{Decisions: tc.decisions})
				switch {
				case tc.want == "" && err != nil:
					t.Fatalf("refused: %v", err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Fatalf("error %v, want one with %q", err, tc.want)
				}
			})
		}
	}
	// Two claims with one alloc ID: one decision is answered for both, a
	// second is a duplicate (as when the check was by alloc ID).
	req := &abi.PolicyRequest{Claims: []abi.ClaimView{{AllocID: "a"}, {AllocID: "b"}, {AllocID: "a"}}}
	if err := checkPolicyResponse(req, &abi.PolicyResponse{Decisions: []abi.Decision{{AllocID: "a", Action: abi.ActionWait}, {AllocID: "a", Action: abi.ActionWait}}}); err == nil || !strings.Contains(err.Error(), "two decisions") {
		t.Fatalf("duplicate alloc ID: %v", err)
	}
}
