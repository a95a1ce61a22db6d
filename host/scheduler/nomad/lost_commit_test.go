package nomad

import (
	"fmt"
	"testing"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// A batch whose commit found no leader is not committed later as it was:
// the next session lists Nomad again and mirrors what Nomad says then.
// Here the allocation the lost batch placed was stopped and collected by
// Nomad before the bridge reconnected: volhost must never mirror it as
// running, nor claim its volume on its node (a publish for a workload
// that no longer exists anywhere).
func TestBridgeDoesNotCommitAStaleBatchAfterNoLeader(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.failNextSync(fmt.Errorf("committing: %w", structs.ErrNoLeader))
	a := h.nomad.setAlloc(web("a1", "n1", clientRunning, "run"), metaV1)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })

	// Nomad stops and collects a1 while the bridge waits to reconnect.
	h.nomad.remove(nil, []string{"a1"})
	h.relist() // past the backoff: the next session lists again
	if got := h.alloc("a1"); got != nil {
		t.Fatalf("allocation a1 mirrored from the batch whose commit was lost: %+v (Nomad no longer has it)", got)
	}
	h.w.mu.Lock()
	claims := append([]string(nil), h.w.claims...)
	h.w.mu.Unlock()
	if len(claims) != 0 {
		t.Fatalf("claims made for an allocation Nomad no longer has: %v", claims)
	}
}
