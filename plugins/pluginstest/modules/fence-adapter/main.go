// Command fence-adapter is a test csi-adapter speaking ABI 1.1: it answers
// volhost_confirm_fence from its config, as a real module would from a list
// of terminated instances that an operator's automation writes into it (the
// sandbox has no network). Its CSI requests are the spec's defaults. Config
// `mode` makes it misbehave on purpose (variants/): see README.md.
package main

import (
	"github.com/volhost/volhost/abi/guest"
	"github.com/volhost/volhost/abi/guest/confirmfence"
)

func main() {}

func init() {
	guest.HandleConfigure(configure)
	guest.HandleAdapt(adapt)
	guest.HandleClassify(classify)
	confirmfence.Handle(confirmFence)
}
