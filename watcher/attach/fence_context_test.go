package attach

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/structs"
)

// switchedLeader confirms until lost is set.
type switchedLeader struct{ lost atomic.Bool }

func (l *switchedLeader) ConfirmLeader(context.Context, uint64) error { return nil }
func (l *switchedLeader) StillConfirmed(uint64) error {
	if l.lost.Load() {
		return fmt.Errorf("expired: %w", structs.ErrNoLeader)
	}
	return nil
}

// otherKey is a caller's own context key.
type otherKey struct{}

// Pin (invariant 1): the fence is looked at when Fence is called, not when
// Call ran, and it survives every derivation the call paths make of the
// context (the CSI client's deadline, the claim rollback's WithoutCancel,
// a step key, the watcher's timeout). A brand-new context carries none and
// Fence lets it through: a path that replaced the context would send
// unfenced, which is why no call path may (none does today).
func TestFenceFollowsDerivedContexts(t *testing.T) {
	l := &switchedLeader{}
	err := Call(context.Background(), l, 7, time.Minute, func(ctx context.Context) error {
		timed, cancel := context.WithTimeout(context.WithValue(ctx, otherKey{}, 1), time.Minute)
		defer cancel()
		derived := map[string]context.Context{
			"as given":       ctx,
			"WithoutCancel":  context.WithoutCancel(ctx),
			"WithStepKey":    WithStepKey(ctx, "k"),
			"WithValue+Time": timed,
		}
		for name, c := range derived {
			if err := Fence(c); err != nil {
				t.Errorf("%s: fence %v while the confirmation holds", name, err)
			}
		}
		l.lost.Store(true)
		for name, c := range derived {
			err := Fence(c)
			var ns *NotSent
			if !errors.As(err, &ns) || !errors.Is(err, structs.ErrNoLeader) {
				t.Errorf("%s: fence %v after the confirmation expired, want a *NotSent wrapping ErrNoLeader", name, err)
			}
			// Not a lost answer: the claim path adds no undo for it and
			// the rollback does not mark an unstage in doubt.
			if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled {
				t.Errorf("%s: a refusal reads as gRPC %s, a lost answer", name, code)
			}
		}
		if err := Fence(context.Background()); err != nil {
			t.Errorf("a context without a fence: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Pin (invariant 1): a Leader without StillConfirmed puts no fence in the
// context (Fence passes), and a nested Call with another term fences by
// the inner term.
func TestFenceOfNestedCalls(t *testing.T) {
	outer := &switchedLeader{}
	inner := &switchedLeader{}
	_ = Call(context.Background(), outer, 1, 0, func(ctx context.Context) error {
		return Call(ctx, inner, 2, 0, func(ctx context.Context) error {
			inner.lost.Store(true)
			if err := Fence(ctx); err == nil {
				t.Error("the inner call's fence is not the one checked")
			}
			return nil
		})
	})
	_ = Call(context.Background(), confirmer{}, 1, 0, func(ctx context.Context) error {
		if err := Fence(ctx); err != nil {
			t.Errorf("a leader that cannot tell put a fence in the context: %v", err)
		}
		return nil
	})
}
