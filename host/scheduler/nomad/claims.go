package nomad

import (
	"context"
	"errors"
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// claimJob is one volume an allocation declares and does not hold yet.
type claimJob struct {
	key     string // alloc/ID/volume/NS/VOL: the in-flight and problem key
	allocID string
	allocNS string // the allocation's namespace: a claim of another's volume is refused as if it did not exist
	nodeID  string
	vol     volumeRequest
}

type claimResult struct {
	job   claimJob
	claim *structs.Claim
	err   error
}

// claimAll queues the claims of the allocations the last commit mirrored
// as live and placed, for each declared volume the allocation does not
// hold yet (in committed state). A failed claim is tried again at the next
// re-list, its problem line kept and its event not repeated.
func (b *Bridge) claimAll(r *run) {
	want := r.wantClaims
	r.wantClaims = nil
	if len(want) == 0 {
		return
	}
	snap := b.store.Snapshot()
	for _, id := range want {
		t := r.allocs[id]
		if t == nil {
			continue
		}
		va, err := snap.AllocByID(nil, id)
		if err != nil || va == nil || va.ClientStatus.Terminal() {
			continue
		}
		for _, v := range t.vols {
			job := claimJob{key: "alloc/" + id + "/volume/" + v.ref(), allocID: id, allocNS: va.Namespace, nodeID: va.NodeID, vol: v}
			if r.inflight[job.key] {
				continue
			}
			vol, err := snap.VolumeByID(nil, v.Namespace, v.VolumeID)
			if err == nil && vol != nil && vol.Claims[id] != nil {
				continue
			}
			r.inflight[job.key] = true
			select {
			case r.claims <- job:
			default:
				// The queue is full: the next re-list queues it again.
				delete(r.inflight, job.key)
			}
		}
	}
}

// claimWorker runs queued claims through the server's claim path (its
// validation, its CSI publish, its term fence).
func (b *Bridge) claimWorker(ctx context.Context, r *run) {
	for job := range r.claims {
		if ctx.Err() != nil {
			continue
		}
		c, err := b.w.ClaimVolume(ctx, &structs.ClaimRequest{Namespace: job.vol.Namespace, VolumeID: job.vol.VolumeID,
			AllocID: job.allocID, NodeID: job.nodeID, Mode: job.vol.Mode})
		select {
		case r.results <- claimResult{job: job, claim: c, err: err}:
		case <-ctx.Done():
		}
	}
}

// claimed records a claim's outcome: a refusal is one problem line and one
// event (not repeated while the same refusal lasts).
func (b *Bridge) claimed(ctx context.Context, r *run, res claimResult) {
	delete(r.inflight, res.job.key)
	j := res.job
	if res.err == nil {
		b.solved(j.key)
		b.mu.Lock()
		b.st.Claims++
		b.mu.Unlock()
		b.log.Info("volume claimed for a Nomad allocation", "alloc", j.allocID, "volume", j.vol.ref(), "node", j.nodeID, "mode", j.vol.Mode)
		return
	}
	if ctx.Err() != nil {
		return
	}
	why := res.err.Error()
	if errors.Is(res.err, structs.ErrNotFound) {
		why = fmt.Sprintf("volume %s is not registered in volhost (%v)", j.vol.ref(), res.err)
	}
	msg := fmt.Sprintf("allocation %s (namespace %s, meta %s): claim of volume %s for %s on node %s refused: %s",
		j.allocID, j.allocNS, j.vol.Key, j.vol.ref(), j.vol.Mode, j.nodeID, why)
	if b.problem(r, j.key, j.allocID, j.nodeID, msg) {
		if err := b.commit(ctx, r, false, false); err != nil {
			b.log.Warn("could not record a refused claim as an event", "error", err)
		}
	}
}
