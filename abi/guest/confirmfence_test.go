package guest

import (
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
)

// TestDispatchConfirmFence: the ABI 1.1 handler gets the decoded request
// and its answer reaches the host encoded; failures become Error.
func TestDispatchConfirmFence(t *testing.T) {
	req := (&abi.FenceRequest{NowUnixMs: 5, Node: abi.NodeView{ID: "n1", Status: "down", Meta: map[string]string{"instance": "i-1"}},
		LostAgeMs: 60000, Claims: []abi.ClaimView{{AllocID: "a1", NodeID: "n1"}}}).MarshalAppend(nil)
	confirmTerminated := func(r *abi.FenceRequest) (*abi.FenceResponse, error) {
		if r.Node.Meta["instance"] != "i-1" || r.LostAgeMs != 60000 || len(r.Claims) != 1 {
			return nil, nil
		}
		return &abi.FenceResponse{NodeID: r.Node.ID, Confirmed: true, Reason: "i-1 terminated", RetryAfterMs: 7}, nil
	}
	tests := []struct {
		name    string
		handler ConfirmFenceFunc
		in      []byte
		want    abi.FenceResponse
		wantErr string
	}{
		{"handler answers", confirmTerminated, req, abi.FenceResponse{NodeID: "n1", Confirmed: true, Reason: "i-1 terminated", RetryAfterMs: 7}, ""},
		{"no handler", nil, req, abi.FenceResponse{}, "no handler registered"},
		{"panic", func(*abi.FenceRequest) (*abi.FenceResponse, error) { panic("boom") }, req, abi.FenceResponse{}, "panic: boom"},
		{"malformed request", confirmTerminated, []byte{0x12, 0x05}, abi.FenceResponse{}, "malformed"},
		{"nil response", func(*abi.FenceRequest) (*abi.FenceResponse, error) { return nil, nil }, req, abi.FenceResponse{}, "no response"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handlers{ConfirmFence: tc.handler}
			out := h.DispatchConfirmFence(tc.in, nil)
			var resp abi.FenceResponse
			if err := resp.Unmarshal(out); err != nil {
				t.Fatalf("response does not decode: %v", err)
			}
			if tc.wantErr != "" {
				if !strings.Contains(resp.Error, tc.wantErr) || resp.Confirmed {
					t.Fatalf("response %+v, want Error containing %q and no confirmation", resp, tc.wantErr)
				}
				return
			}
			if resp != tc.want {
				t.Fatalf("response %+v, want %+v", resp, tc.want)
			}
		})
	}
	if got := errorResponse(abi.ExportConfirmFence, lengthError(9, 1), nil); len(got) == 0 {
		t.Fatal("errorResponse has no FenceResponse for volhost_confirm_fence")
	}
}
