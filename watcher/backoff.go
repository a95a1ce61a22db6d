package watcher

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// backoff is the delay before the attempt after the n-th consecutive
// failure: base*2^(n-1) capped at max, spread by +-Jitter so claims that
// failed together (a driver outage) do not retry in lock step.
func (w *Watcher) backoff(n int) time.Duration {
	d := w.cfg.BackoffBase
	for i := 1; i < n && d < w.cfg.BackoffMax; i++ {
		d *= 2
	}
	if d > w.cfg.BackoffMax {
		d = w.cfg.BackoffMax
	}
	if j := w.cfg.Jitter; j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*rand.Float64()-1)))
	}
	return d
}

// controllerLimiter bounds ControllerUnpublishVolume calls per plugin. The
// reference system allows one destructive controller RPC per plugin at a
// time because drivers race on attach/detach (hashicorp/nomad#17996).
type controllerLimiter struct {
	n    int
	mu   sync.Mutex
	sems map[string]chan struct{}
}

func newControllerLimiter(n int) *controllerLimiter {
	return &controllerLimiter{n: n, sems: make(map[string]chan struct{})}
}

// acquire waits for a slot of plugin's semaphore or for ctx to end (a
// step-down must not wait behind a hung driver call: hashicorp/nomad#10927,
// a detach that hangs with no cancellation).
func (l *controllerLimiter) acquire(ctx context.Context, plugin string) (release func(), err error) {
	l.mu.Lock()
	sem, ok := l.sems[plugin]
	if !ok {
		sem = make(chan struct{}, l.n)
		l.sems[plugin] = sem
	}
	l.mu.Unlock()
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
