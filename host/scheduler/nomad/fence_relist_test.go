package nomad

import (
	"errors"
	"testing"
	"time"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// a1 is held (lost on n2, Nomad reports n2 down). The stream drops; the
// next session's opening re-list reads a new allocation's meta (b1) and
// an operator fences n2 meanwhile. The re-list judged a1 on its snapshot
// taken before the fence; the nodes watch, armed for the whole run, fires
// and a1 is released without waiting for the next periodic re-list (the
// fake clock never gets there). Armed only after the re-list, on a
// snapshot holding the fence, it never fired.
func TestBridgeActsOnAFenceDuringTheOpeningRelist(t *testing.T) {
	h := newHarness(t)
	g := h.withGatedMeta("b1")
	h.start()
	h.heldOnDownNode("a1", "n2")

	// b1 placed while the bridge is disconnected: its meta is read by the
	// next session's re-list.
	h.nomad.setAlloc(web("b1", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	n := h.nomad.streamCount()
	h.nomad.push(t, Batch{Err: errors.New("unexpected EOF")})
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	h.advance(time.Second)
	<-g.entered
	h.fence("n2")
	close(g.release)
	testutil.WaitFor(t, "the next event stream", func() bool { return h.nomad.streamCount() > n })
	testutil.WaitFor(t, "b1 claimed (the re-list applied)", func() bool { return h.claimed("v2", "b1") })

	testutil.WaitFor(t, "a1 released once n2 is fenced, without a periodic re-list", func() bool {
		return h.alloc("a1").ClientStatus == structs.AllocLost
	})
}
