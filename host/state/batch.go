package state

import (
	"github.com/volhost/volhost/host/structs"
)

// Group commit (BenchmarkCheckpointGroupCommit in host/cluster): a
// ClaimCheckpointBatchRequest applies many claim
// checkpoints in one raft entry and one memdb transaction. Each checkpoint
// is validated against the state the checkpoints before it left, exactly
// as if each had its own entry in that order, and applied only when it
// passes; a refused one changes nothing (validation never writes) and
// fails no other. The entry's response, []error, holds each checkpoint's
// own answer (nil: applied). One transaction rather than one per
// checkpoint, because every write of the entry shares its raft index: a
// reader must never see part of an index and then, waiting for a higher
// one, miss the rest.

// validateCheckpointBatch checks the batch's shape only; the checkpoints
// are validated one by one when the batch is applied, so one bad
// checkpoint cannot refuse the others.
func validateCheckpointBatch(_ *Snapshot, r *structs.ClaimCheckpointBatchRequest) error {
	switch n := len(r.Checkpoints); {
	case n == 0:
		return structs.Invalid("checkpoints", "must not be empty")
	case n > structs.MaxCheckpointBatch:
		return structs.Invalid("checkpoints", "%d checkpoints exceed the batch bound of %d", n, structs.MaxCheckpointBatch)
	}
	for i, c := range r.Checkpoints {
		if c == nil {
			return structs.Invalid("checkpoints", "item %d is nil", i)
		}
	}
	return nil
}

// checkpointBatch applies each checkpoint that passes validation, in order.
// An error from applying a validated checkpoint is a store bug: it fails
// the whole transaction (nothing of the entry is applied).
func (w *writer) checkpointBatch(r *structs.ClaimCheckpointBatchRequest) (any, error) {
	errs := make([]error, len(r.Checkpoints))
	for i, c := range r.Checkpoints {
		if err := validateCheckpoint(w.snap, c); err != nil {
			errs[i] = err
			continue
		}
		if _, err := w.checkpointClaim(c); err != nil {
			return nil, err
		}
	}
	return errs, nil
}
