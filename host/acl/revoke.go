package acl

import (
	"context"
	"errors"
	"fmt"

	memdb "github.com/hashicorp/go-memdb"
)

// Watcher is a State that can tell when what a secret resolves to may
// have changed. *state.Store implements it: a revocation then reaches a
// long-lived stream the moment it is committed, not at its next request.
type Watcher interface {
	// ACLWatch adds to ws the channels that fire when the token whose
	// secret hashes to secretHash is written or deleted, when any policy
	// is, and when the whole state is replaced (a snapshot restore).
	ACLWatch(ws memdb.WatchSet, secretHash string) error
}

// ErrRevoked wraps why a watched secret no longer passes its check.
var ErrRevoked = errors.New("token revoked")

// WatchRevocation watches what secret resolves to for as long as ctx
// lasts. The returned channel receives one error (wrapping ErrRevoked and
// the reason: the token deleted or expired, or allowed refusing the
// identity after a policy changed) as soon as secret stops passing
// allowed, and nothing if ctx ends first.
//
// A token checked only when a stream opened would keep that stream
// working after it was deleted or expired: a node agent would keep its
// node ready and keep receiving volume secrets, a blocking query would
// answer after its caller lost the right to read. The check runs again
// at every ACL write (through Watcher, when the state implements it) and
// at the token's expiration time on the resolver's clock, so a test with
// a fake clock reaches expiry by advancing it.
func (r *Resolver) WatchRevocation(ctx context.Context, secret string, allowed func(*Identity) error) <-chan error {
	out := make(chan error, 1)
	go func() {
		if err := r.watchRevocation(ctx, secret, allowed); err != nil {
			out <- err
		}
	}()
	return out
}

// watchRevocation returns the revocation, or nil when ctx ends first.
func (r *Resolver) watchRevocation(ctx context.Context, secret string, allowed func(*Identity) error) error {
	w, _ := r.state.(Watcher)
	hash := HashSecret(secret)
	for {
		// Arm the watch before reading, so a write between the read and
		// the wait still wakes it.
		ws := memdb.NewWatchSet()
		if w != nil {
			if err := w.ACLWatch(ws, hash); err != nil {
				return fmt.Errorf("%w: %w", ErrRevoked, err) // fail closed: nothing says the token still holds
			}
		}
		id, err := r.Resolve(secret)
		if err == nil {
			err = allowed(id)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrRevoked, err)
		}
		wait, cancel := context.WithCancel(ctx)
		stopTimer := func() bool { return false }
		if id.Token != nil && !id.Token.ExpirationTime.IsZero() {
			// Expired() holds from ExpirationTime on, so waking then
			// finds the token expired: no busy loop at the boundary.
			stopTimer = r.clock.AfterFunc(id.Token.ExpirationTime.Sub(r.clock.Now()), cancel).Stop
		}
		_ = ws.WatchCtx(wait)
		cancel()
		stopTimer()
		if ctx.Err() != nil {
			return nil
		}
	}
}
