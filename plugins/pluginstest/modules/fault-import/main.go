// Command fault-import is a release policy that imports a host function
// outside the allowed set (env.forbidden). The host must refuse it at load,
// naming the import, before instantiating it. It never calls the import in
// practice (only for config call_forbidden = "yes"), but the import is in its
// import section, which is what the host validates.
package main

import "github.com/volhost/volhost/abi/guest"

func main() {}

func init() {
	guest.HandleConfigure(configure)
	guest.HandleRelease(decide)
}
