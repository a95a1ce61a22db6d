// Command default-policy is the default release policy as a volhost Wasm
// module (kind release-policy): the same decisions as the host's native
// default, from abi/defaultpolicy. Build with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o default-policy.wasm .
package main

import "github.com/volhost/volhost/abi/guest"

// main is never called: a c-shared guest starts with _initialize, which runs
// init, and then serves exports.
func main() {}

func init() {
	guest.HandleConfigure(configure)
	guest.HandleReleaseInto(decide)
}
