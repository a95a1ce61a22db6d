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

// StillLeader is a Leader that can say, without a round trip, whether
// the confirmation it gave for term still holds (host/cluster: the last
// verification is younger than the leader lease).
type StillLeader interface {
	StillConfirmed(term uint64) error
}

// Call runs one CSI call once l has confirmed leadership of term (a
// deposed or paused leader sends nothing), under timeout when it is
// positive. A failed confirmation is returned as a *NotSent: not the
// driver's error, not the claim's failure, and nothing ran. A nil l runs
// unfenced (the watcher's own tests).
//
// Between the confirmation and the call leaving the process lie the
// adapter module's work and the connection's set-up, milliseconds in
// which a SIGSTOP or a VM freeze may land: a chaos run saw a leader
// paused for 1.4 s send NodeUnstageVolume 5 ms after it woke, its lease
// long gone and another leader in charge. So when l can tell, the context
// carries the confirmation, and the CSI client and the node connection
// check it again (Fence) right before they send.
func Call(ctx context.Context, l Leader, term uint64, timeout time.Duration, call func(context.Context) error) error {
	if l != nil {
		if err := l.ConfirmLeader(ctx, term); err != nil {
			return &NotSent{Err: err}
		}
		if sl, ok := l.(StillLeader); ok {
			ctx = context.WithValue(ctx, fenceKey{}, func() error { return sl.StillConfirmed(term) })
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

type fenceKey struct{}

// HasFence reports whether ctx carries a confirmation Fence checks.
func HasFence(ctx context.Context) bool {
	f, _ := ctx.Value(fenceKey{}).(func() error)
	return f != nil
}

// Fence checks again, right before a CSI call or node step is sent, the
// leadership confirmation Call put in ctx: nil when it still holds or ctx
// carries none, a *NotSent otherwise (nothing was sent).
func Fence(ctx context.Context) error {
	f, _ := ctx.Value(fenceKey{}).(func() error)
	if f == nil {
		return nil
	}
	if err := f(); err != nil {
		return &NotSent{Err: err}
	}
	return nil
}
