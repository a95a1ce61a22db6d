package attach

import (
	"context"
	"net/url"
	"strconv"
	"strings"

	"github.com/volhost/volhost/host/structs"
)

// Idempotency keys of release steps. A node step sent through a
// node agent carries the key of the claim step it runs, so an agent that
// ran the step and died before its answer reached the leader can answer
// the leader's retry from its journal (host/client) instead of calling the
// driver a second time.
//
// The key names the claim's life (volume, allocation and the log index
// that created the claim) and the step. It deliberately carries no attempt
// counter: the retry that matters is the one after the lost answer, which
// the leader records as a failed attempt, so a key with the attempt in it
// would never match. Each claim runs each release step to success once:
// nothing publishes a releasing claim's target again, and an unstage is
// only sent when committed state says no other claim on the machine uses
// the staging path (the watcher's lastOnNodeCommitted, under the volume's
// lock), so a recorded success of the same key is still the truth when it
// is replayed.
//
// The key lives here, beside the node-step interface, because it travels
// with the step: the watcher puts it on the context, the node connection
// (host/nodeconn) sends it, the agent's journal (host/client) keys on it.

type stepKeyCtx struct{}

// WithStepKey returns ctx carrying the idempotency key of a release step.
func WithStepKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, stepKeyCtx{}, key)
}

// StepKey is the idempotency key of the release step ctx runs, "" when ctx
// carries none (the claim path's steps and their rollback: a publish
// undone and retried must run again, so those are never answered from a
// journal).
func StepKey(ctx context.Context) string {
	k, _ := ctx.Value(stepKeyCtx{}).(string)
	return k
}

// Key is the idempotency key of claim c's release step of volume ref.
func Key(ref structs.VolumeRef, c *structs.Claim, step string) string {
	parts := []string{ref.Namespace, ref.ID, c.AllocID, strconv.FormatUint(c.CreateIndex, 10), step}
	for i, s := range parts {
		parts[i] = url.PathEscape(s) // IDs may hold '/': one key, one claim step
	}
	return strings.Join(parts, "/")
}

// StepAcker is implemented by a node service that keeps a journal of
// keyed steps (a connected node agent): once the outcome of a step is
// committed the watcher acknowledges its key, and the journal forgets it.
type StepAcker interface {
	AckStep(key string)
}

// Ack acknowledges the keys of steps whose outcome is now committed, when
// node keeps a journal (StepAcker); a direct-mode node keeps none.
func Ack(node NodeRelease, keys ...string) {
	a, ok := node.(StepAcker)
	if !ok {
		return
	}
	for _, k := range keys {
		a.AckStep(k)
	}
}
