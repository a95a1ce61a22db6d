//go:build wasip1

//lint:file-ignore U1000 the export is reached by the host through go:wasmexport, which staticcheck does not follow.

package confirmfence

import (
	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/guest"
)

//go:wasmexport volhost_confirm_fence
func exportConfirmFence(n int32) int64 {
	return guest.ServeExport(n, abi.ExportConfirmFence, (*guest.Handlers).DispatchConfirmFence)
}
