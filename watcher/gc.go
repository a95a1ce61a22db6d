package watcher

import (
	"context"
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// gcBatch bounds the volumes named in one GC log entry.
const gcBatch = 1000

// GC writes the empty GC claim for every volume with a releasable claim
// (`volhost system gc`) and returns how many volumes it named. Applying it
// bumps their modify index, which wakes the watcher on the leader through
// the same path as any other write.
func (w *Watcher) GC(ctx context.Context) (int, error) {
	refs, err := w.deps.State.ReleasableVolumes()
	if err != nil {
		return 0, fmt.Errorf("claim gc: list releasable volumes: %w", err)
	}
	return w.writeGC(ctx, refs)
}

func (w *Watcher) writeGC(ctx context.Context, refs []structs.VolumeRef) (int, error) {
	n := 0
	for len(refs) > 0 {
		batch := refs[:min(len(refs), gcBatch)]
		refs = refs[len(batch):]
		if _, err := w.deps.Writer.GCClaims(ctx, &structs.ClaimGCRequest{Volumes: batch}); err != nil {
			return n, fmt.Errorf("claim gc: write gc claims: %w", err)
		}
		n += len(batch)
	}
	return n, nil
}

// gcLoop is the periodic claim GC, only while enabled (leader). It is a
// safety net for wake-ups lost anywhere (the reference system relies on it
// alone, so allocations wait on "volume max claims reached" until its 5
// minute run: hashicorp/nomad#13416): it bumps only volumes with a claim that has been
// releasable for GCThreshold and is not waiting for its backoff.
func (w *Watcher) gcLoop(ctx context.Context) {
	defer w.wg.Done()
	t := w.clock.NewTicker(w.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		refs, err := w.gcCandidates()
		if err != nil {
			w.logger.Warn("periodic claim gc", "error", err)
			continue
		}
		if n, err := w.writeGC(ctx, refs); err != nil {
			if ctx.Err() == nil {
				w.logger.Warn("periodic claim gc", "error", err)
			}
		} else if n > 0 {
			w.logger.Debug("periodic claim gc", "volumes", n)
		}
	}
}

// gcCandidates lists releasable volumes with a due claim older than GCThreshold.
func (w *Watcher) gcCandidates() ([]structs.VolumeRef, error) {
	refs, err := w.deps.State.ReleasableVolumes()
	if err != nil {
		return nil, fmt.Errorf("list releasable volumes: %w", err)
	}
	now := w.clock.Now()
	var out []structs.VolumeRef
	for _, ref := range refs {
		v, err := w.deps.State.Volume(ref.Namespace, ref.ID)
		if err != nil {
			return nil, fmt.Errorf("read volume %s/%s: %w", ref.Namespace, ref.ID, err)
		}
		if v == nil {
			continue
		}
		for _, c := range v.Claims {
			if c.NextAttempt.After(now) {
				continue
			}
			a, err := w.deps.State.Alloc(c.AllocID)
			if err != nil {
				return nil, fmt.Errorf("read allocation %q: %w", c.AllocID, err)
			}
			if a == nil || (a.ClientStatus.Terminal() && now.Sub(a.ModifyTime) >= w.cfg.GCThreshold) {
				out = append(out, ref)
				break
			}
		}
	}
	return out, nil
}
