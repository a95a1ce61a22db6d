package main

import (
	"testing"

	"github.com/volhost/volhost/abi"
)

func TestConfirmFence(t *testing.T) {
	lost := &abi.FenceRequest{Node: abi.NodeView{ID: "n1", Status: "down", ExternalID: "i-1"}}
	other := &abi.FenceRequest{Node: abi.NodeView{ID: "n2", Status: "down", Meta: map[string]string{"instance": "i-9"}}}
	tests := []struct {
		mode      string
		req       *abi.FenceRequest
		confirmed bool
		valid     bool
	}{
		{"", lost, true, true},
		{"", other, false, true},
		{modeConfirm, other, true, true},
		{modeOtherNode, lost, true, false},
		{modeNoReason, lost, true, false},
	}
	for _, tc := range tests {
		if _, err := configure(map[string]string{"terminated": "i-1, i-2", "mode": tc.mode, "retry_after_ms": "60000"}); err != nil {
			t.Fatal(err)
		}
		resp, err := confirmFence(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Confirmed != tc.confirmed || (abi.FenceAnswerError(tc.req, resp) == "") != tc.valid {
			t.Errorf("mode %q node %s: %+v, want confirmed=%v valid=%v", tc.mode, tc.req.Node.ID, resp, tc.confirmed, tc.valid)
		}
		if !resp.Confirmed && resp.RetryAfterMs != 60000 {
			t.Errorf("retry_after_ms %d, want 60000", resp.RetryAfterMs)
		}
	}
	if _, err := configure(map[string]string{"mode": "bogus"}); err == nil {
		t.Error("configure accepted mode bogus")
	}
}
