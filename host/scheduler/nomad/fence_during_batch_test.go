package nomad

import (
	"context"
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// gatedMeta is the fake Nomad whose Meta of one allocation blocks until
// the test lets it go: the bridge's goroutine is then inside applyBatch.
type gatedMeta struct {
	*fakeNomad
	id      string
	entered chan struct{}
	release chan struct{}
}

func (g *gatedMeta) Meta(ctx context.Context, allocID string) (map[string]string, error) {
	if allocID == g.id {
		close(g.entered)
		<-g.release
	}
	return g.fakeNomad.Meta(ctx, allocID)
}

// a1 is held (lost on n2, which Nomad reports down). An operator fences
// n2 while the bridge is busy applying another batch (here: reading b1's
// meta). The bridge acts on the fence without waiting for a re-list: its
// nodes watch stays armed across the batch. Armed again after the batch,
// on a snapshot that already held the fence, it never fired, and a1
// stayed held until the next periodic re-list.
func TestBridgeActsOnAFenceCommittedDuringABatch(t *testing.T) {
	h := newHarness(t)
	g := h.withGatedMeta("b1")
	h.start()
	h.heldOnDownNode("a1", "n2")

	b := h.nomad.setAlloc(web("b1", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{b}})
	<-g.entered
	h.fence("n2")
	close(g.release)
	testutil.WaitFor(t, "b1 claimed (its batch applied)", func() bool { return h.claimed("v2", "b1") })

	testutil.WaitFor(t, "a1 released once n2 is fenced, without a re-list", func() bool {
		return h.alloc("a1").ClientStatus == structs.AllocLost
	})
}
