// Command gcepd-adapter is a CSI adapter (volhost Wasm module) for the GCE
// persistent-disk driver (pd.csi.storage.gke.io): it names the driver's node
// IDs (projects/P/zones/Z/instances/N) from node metadata and classifies the
// driver's errors. See README.md and adapter.go.
package main

import "github.com/volhost/volhost/abi/guest"

func main() {}

func init() {
	guest.HandleConfigure(configure)
	guest.HandleAdapt(adapt)
	guest.AdaptSteps(adaptSteps...)
	guest.HandleClassify(classify)
}
