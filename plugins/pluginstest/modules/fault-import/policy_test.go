package main

import (
	"testing"

	"github.com/volhost/volhost/abi"
)

func TestDecidesLikeDefaultAndCallsForbiddenOnlyWhenAsked(t *testing.T) {
	if v, err := configure(nil); v != "1.0.0" || err != nil {
		t.Fatalf("configure = %q, %v", v, err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("call_forbidden=yes did not reach the forbidden import")
			}
		}()
		_, _ = configure(map[string]string{"call_forbidden": "yes"})
	}()
	resp, err := decide(&abi.PolicyRequest{Claims: []abi.ClaimView{{AllocID: "a", State: "taken"}}})
	if err != nil || len(resp.Decisions) != 1 || resp.Decisions[0].Action != abi.ActionReleaseSkipNode {
		t.Fatalf("decide = %+v, %v", resp, err)
	}
}
