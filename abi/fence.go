package abi

// ABI 1.1: volhost_confirm_fence (ABI.md sections 2 and 10). A csi-adapter
// module that exports it may confirm that a node whose agent stopped
// heartbeating is really off (a fence), so its claims skip their node
// steps. The host only ever asks about a node that is heartbeat-lost and
// not fenced, checks the answer against what it asked and against
// committed state, and treats anything but a valid confirmation as "not
// confirmed": a module can shorten a wait for a lost node, never make the
// host detach from a node that is up (Kubernetes #120344).

import (
	"fmt"
	"unicode/utf8"
)

// MaxFenceReasonLength bounds FenceResponse.Reason: it becomes the fence's
// reason, shown in events, on claims and by the CLI.
const MaxFenceReasonLength = 256

// FenceAnswerError says what is wrong with a decoded FenceResponse to req,
// or returns "" for a usable one (ABI.md section 7): it must name the node
// it was asked about, a confirmation needs a reason of at most
// MaxFenceReasonLength bytes of valid UTF-8, and retry_after_ms must not be
// negative. The host and the authoring tools share it.
func FenceAnswerError(req *FenceRequest, resp *FenceResponse) string {
	switch {
	case resp.NodeID != req.Node.ID:
		return fmt.Sprintf("answer names node %q, but the module was asked about node %q", resp.NodeID, req.Node.ID)
	case resp.RetryAfterMs < 0:
		return "retry_after_ms is negative"
	case !utf8.ValidString(resp.Reason):
		return "reason is not valid UTF-8"
	case len(resp.Reason) > MaxFenceReasonLength:
		return fmt.Sprintf("reason is %d bytes long, at most %d allowed", len(resp.Reason), MaxFenceReasonLength)
	case resp.Confirmed && resp.Reason == "":
		return "confirmed without a reason: a fence must say why the node is known to be off"
	}
	return ""
}
