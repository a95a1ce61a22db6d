// Package confirmfence gives a Go csi-adapter module ABI 1.1's optional
// export volhost_confirm_fence (ABI.md sections 2 and 10): importing it is
// what adds the export, and the host asks only a module that has it.
//
//	func init() {
//		confirmfence.Handle(func(req *abi.FenceRequest) (*abi.FenceResponse, error) {
//			return &abi.FenceResponse{NodeID: req.Node.ID, Confirmed: ..., Reason: ...}, nil
//		})
//	}
//
// It is its own package because a Go guest exports every go:wasmexport
// function it links: were the export in abi/guest, every Go module would
// have it, and the host would ask modules that have nothing to say.
package confirmfence

import (
	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/guest"
)

// Handle registers the handler the export serves. Call it from init. The
// answer must name req.Node.ID; Confirmed needs a Reason (at most
// abi.MaxFenceReasonLength bytes), which becomes the fence's reason.
func Handle(f func(req *abi.FenceRequest) (*abi.FenceResponse, error)) {
	guest.RegisterConfirmFence(f)
}
