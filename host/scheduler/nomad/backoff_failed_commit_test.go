package nomad

import (
	"fmt"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

func (h *harness) syncCount() int {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.w.syncs
}

// a1 is held (lost on n2, which Nomad reports down). Nomad is unreachable;
// during the backoff an operator fences n2: reheld (in wait) releases a1,
// but the commit finds no leader. The operator then unfences n2 (wrong
// machine). The release that failed is not committed later: a1 is judged
// again, and held, as Nomad still reports it lost on a down n2 that is
// not fenced. Kept pending in the backoff, it was committed after the
// unfence, releasing a1 under a task that may run.
func TestBridgeBackoffReleaseWhoseCommitFailedIsJudgedAgain(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.heldOnDownNode("a1", "n2")

	h.unreachableAndRetrying()
	testutil.WaitFor(t, "the failure's event", func() bool { return len(h.events("unexpected EOF")) == 1 })

	syncs := h.syncCount()
	h.failNextSync(fmt.Errorf("committing: %w", structs.ErrNoLeader))
	h.fence("n2")
	testutil.WaitFor(t, "the backoff's reheld commit (refused: no leader)", func() bool { return h.syncCount() > syncs })
	if got := h.alloc("a1").ClientStatus; got != structs.AllocRunning {
		t.Fatalf("setup: a1 %s", got)
	}
	// The operator takes the fence back: n2 was not the machine powered off.
	if err := h.w.apply(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: "n2"}, 0); err != nil {
		t.Fatal(err)
	}
	// Nomad back; the next session lists a1 lost on n2 down, unfenced.
	h.nomad.mu.Lock()
	h.nomad.listErr = nil
	h.nomad.mu.Unlock()
	n := h.nomad.streamCount()
	h.advance(time.Second)
	testutil.WaitFor(t, "the next event stream", func() bool { return h.nomad.streamCount() > n })
	vn, _ := h.store.Snapshot().NodeByID(nil, "n2")
	if got := h.alloc("a1").ClientStatus; got.Terminal() {
		t.Fatalf("a1 released (%s) although n2 is unfenced (fence %v) and Nomad reports it down with a1 lost: "+
			"the backoff's failed commit was kept pending and committed after the unfence", got, vn.Fence)
	}
}
