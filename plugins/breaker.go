package plugins

import (
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Breaker defaults: after DefaultBreakerThreshold consecutive faults a
// module's breaker opens and its calls fail fast (fail closed: no release
// on a failed decision); it half-opens after DefaultBreakerCooldown.
const (
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = 30 * time.Second
)

type breakerState int

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

// breaker is a per-module circuit breaker: after threshold consecutive
// faults it opens and calls fail fast (fail closed: a failed decision never
// releases a claim); after cooldown one probe call is let through, whose
// success closes it and whose fault reopens it.
type breaker struct {
	clock     clockwork.Clock
	threshold int
	cooldown  time.Duration

	mu          sync.Mutex
	state       breakerState
	consecutive int
	openedAt    time.Time
	probing     bool
}

func newBreaker(clock clockwork.Clock, threshold int, cooldown time.Duration) *breaker {
	return &breaker{clock: clock, threshold: threshold, cooldown: cooldown}
}

// allow reports whether a call may proceed. probe is true for the single
// half-open trial call, which must be reported through done.
func (b *breaker) allow() (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerClosed:
		return true, false
	case breakerOpen:
		if b.clock.Since(b.openedAt) < b.cooldown {
			return false, false
		}
		b.state = breakerHalfOpen
		b.probing = true
		return true, true
	default: // half-open: only the one probe is in flight
		if b.probing {
			return false, false
		}
		b.probing = true
		return true, true
	}
}

// done records a call's outcome and returns a state change to report:
// +1 opened, -1 closed, 0 none.
func (b *breaker) done(probe, fault bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if !fault {
		b.consecutive = 0
		if b.state != breakerClosed && probe {
			b.state = breakerClosed
			return -1
		}
		return 0
	}
	b.consecutive++
	switch {
	case probe:
		// The trial failed: open again for a full cool-down.
		b.state = breakerOpen
		b.openedAt = b.clock.Now()
	case b.state == breakerClosed && b.consecutive >= b.threshold:
		b.state = breakerOpen
		b.openedAt = b.clock.Now()
		return 1
	}
	return 0
}

// isOpen reports whether calls are being refused (open or half-open).
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != breakerClosed
}

// reset closes the breaker: a newly swapped-in generation starts clean.
func (b *breaker) reset() (wasOpen bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasOpen = b.state != breakerClosed
	b.state, b.consecutive, b.probing = breakerClosed, 0, false
	return wasOpen
}

// abandon gives back a probe slot whose call said nothing about the module
// (the caller cancelled): the next call may probe instead.
func (b *breaker) abandon() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}
