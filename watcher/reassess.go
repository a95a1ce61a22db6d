package watcher

import (
	"fmt"

	"github.com/volhost/volhost/host/structs"
)

// Reassess queues a pass now over every volume with a releasable claim
// that pred selects (nil: every one), and returns how many it queued. The
// agent calls it when a module's serving generation changes: what the old
// generation decided (a claim deferred with retry_after 30 s, say) is
// judged again at once by the new one, instead of when the old decision
// said to look again. A volume already queued stays queued once; one in a
// pass runs again when the pass ends. It does nothing while the watcher is
// disabled (not the leader): a step-up assesses every volume anyway.
//
// Only volumes with a releasable claim are visited: those are the ones a
// policy has judged (it is asked only about claims whose allocation is
// terminal or gone). A claim backing off after a failed step keeps its
// NextAttempt; the pass re-asks the policy about the others.
func (w *Watcher) Reassess(pred func(v *structs.Volume) bool) (int, error) {
	if !w.Enabled() {
		return 0, nil
	}
	refs, err := w.deps.State.ReleasableVolumes()
	if err != nil {
		return 0, fmt.Errorf("reassess: list releasable volumes: %w", err)
	}
	var due []structs.VolumeRef
	for _, ref := range refs {
		if pred != nil {
			v, err := w.deps.State.Volume(ref.Namespace, ref.ID)
			if err != nil {
				return 0, fmt.Errorf("reassess: read volume %s/%s: %w", ref.Namespace, ref.ID, err)
			}
			if v == nil || !pred(v) {
				continue
			}
		}
		due = append(due, ref)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ref := range due {
		w.enqueueLocked(ref)
	}
	if len(due) > 0 {
		w.logger.Debug("reassessing volumes", "volumes", len(due))
	}
	return len(due), nil
}
