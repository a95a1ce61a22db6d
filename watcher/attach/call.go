package attach

import (
	"context"
	"time"
)

// Leader confirms a leadership term (host/cluster): the failover fence of
// leader work. Exclusion between an old and a new leader must not rest on
// timing alone, so every CSI call of either direction is preceded by a
// confirmation of the term its work started under.
type Leader interface {
	// ConfirmLeader returns nil only if this server still leads in term,
	// confirmed by a quorum within a bounded age; otherwise an error
	// wrapping structs.ErrNoLeader.
	ConfirmLeader(ctx context.Context, term uint64) error
}

// Call runs one CSI call once l has confirmed leadership of term (a
// deposed or paused leader sends nothing), under timeout when it is
// positive. A failed confirmation is returned as a *NotSent: not the
// driver's error, not the claim's failure, and nothing ran. A nil l runs
// unfenced (the watcher's own tests).
func Call(ctx context.Context, l Leader, term uint64, timeout time.Duration, call func(context.Context) error) error {
	if l != nil {
		if err := l.ConfirmLeader(ctx, term); err != nil {
			return &NotSent{Err: err}
		}
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return call(ctx)
}

// NotSent is a CSI call not sent because leadership could not be
// confirmed.
type NotSent struct{ Err error }

func (e *NotSent) Error() string { return "not sent: " + e.Err.Error() }
func (e *NotSent) Unwrap() error { return e.Err }
