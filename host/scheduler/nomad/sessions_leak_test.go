package nomad

import (
	"runtime"
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// Many sessions (reconnects), each with node changes firing the nodes
// watch: the goroutine count must not grow with the sessions.
func TestBridgeSessionsLeaveNoGoroutines(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.claimRunning("a1", "n2")
	h.reconnect()
	before := runtime.NumGoroutine()
	for i := range 40 {
		st := structs.NodeDown
		if i%2 == 0 {
			st = structs.NodeReady
		}
		_ = h.w.apply(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n1", Status: st, LastSeen: t0}, 0)
		h.reconnect()
	}
	testutil.WaitFor(t, "as many goroutines after 40 sessions as before (a few of slack)", func() bool {
		return runtime.NumGoroutine() <= before+3
	})
}
