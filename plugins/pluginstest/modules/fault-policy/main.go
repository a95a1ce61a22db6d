// Command fault-policy is a deliberately faulty release policy used by the
// host's tests (plugins/). One module covers every runtime fault, chosen by
// config `mode` (once per instance) or per request by the volume context key
// "fault.mode", so the tests compile one module instead of one per fault.
// See README.md for the modes.
package main

import "github.com/volhost/volhost/abi/guest"

func main() {}

func init() {
	guest.HandleConfigure(configure)
	guest.HandleReleaseRaw(decideRaw)
}
