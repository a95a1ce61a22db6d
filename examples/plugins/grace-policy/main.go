// Command grace-policy is a release policy (volhost Wasm module) that waits a
// configurable grace period after an allocation ends before releasing its
// claims, and releases at once, skipping the node step, when the claim's node
// is down or gone. See README.md and grace.go.
package main

import "github.com/volhost/volhost/abi/guest"

func main() {}

func init() {
	guest.HandleConfigure(configure)
	guest.HandleRelease(decide)
}
