package watcher

import (
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"

	"github.com/volhost/volhost/host/structs"
)

// Defaults for Config. They follow the reference system where it is right
// (Nomad's volumewatcher and csi_endpoint: 2 min CSI timeout, 1 s..1 min
// backoff, 5 min GC and quiescence)
// and improve on it where it hurts (stuck detection instead of 24 h of silent
// retries).
const (
	DefaultMaxConcurrency        = 16
	DefaultControllerConcurrency = 1
	DefaultIdleTimeout           = 5 * time.Minute
	DefaultBackoffBase           = time.Second
	DefaultBackoffMax            = time.Minute
	DefaultJitter                = 0.2
	DefaultStuckAfter            = time.Hour
	DefaultCSITimeout            = 2 * time.Minute
	DefaultGCInterval            = 5 * time.Minute
	DefaultGCThreshold           = 5 * time.Minute
	DefaultAutoForceAfter        = 15 * time.Minute
	DefaultMaxRetryAfter         = time.Hour
	DefaultAbandonAfter          = 3
)

// Config tunes the watcher. Zero values take the defaults above.
type Config struct {
	// MaxConcurrency bounds how many volumes are worked on at once.
	MaxConcurrency int
	// ControllerConcurrency bounds ControllerUnpublishVolume calls in flight
	// per plugin. The default of 1 matches the reference system: many drivers
	// race on attach/detach (device names, hashicorp/nomad#17996).
	ControllerConcurrency int
	// IdleTimeout is how long a volume's bookkeeping (wake-up timer, rate
	// limiter) is kept after its last pass before it is dropped. No goroutine
	// is held for an idle volume either way.
	IdleTimeout time.Duration
	// BackoffBase and BackoffMax bound the per-claim exponential backoff:
	// the n-th consecutive failure waits min(base*2^(n-1), max) +- Jitter.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Jitter is the relative spread applied to each backoff (0.2 = +-20%),
	// so claims failing together do not retry in lock step. Negative
	// disables it (tests).
	Jitter float64
	// MaxAttempts marks a volume stuck once one of its claims has failed
	// this many times in a row. 0 (the default) means no attempt limit:
	// StuckAfter alone decides. Being stuck never stops the retries (they
	// continue at the backoff cap): it makes the failure visible.
	MaxAttempts int
	// StuckAfter marks a volume stuck once one of its claims has been
	// failing for this long.
	StuckAfter time.Duration
	// CSITimeout is the deadline of every CSI call.
	CSITimeout time.Duration
	// GCInterval is the period of the claim GC while enabled (leader).
	GCInterval time.Duration
	// GCThreshold is how long a claim must have been releasable before the
	// periodic GC bumps its volume.
	GCThreshold time.Duration
	// AutoForceDeregister is the opt-in automatic escape hatch: a volume
	// stuck for AutoForceAfter whose allocations are all terminal or gone is
	// force-deregistered (no CSI calls; the store records the leftover
	// attachments). Off by default.
	AutoForceDeregister bool
	AutoForceAfter      time.Duration
	// Clock is the time source; tests pass a clockwork fake.
	Clock clockwork.Clock
	// VolumeRateLimit, when > 0, limits passes per volume (VolumeRateBurst
	// at once). Off by default; benchmarks use 1/s burst 3 to emulate the
	// reference system.
	VolumeRateLimit rate.Limit
	VolumeRateBurst int
	// Metrics receives release events; nil discards them.
	Metrics Metrics
	// AbandonAfter is how many failed attempts a claim that no CSI call
	// can ever release (its plugin deregistered, or its node gone with
	// no external node ID) makes before it is abandoned with a reason.
	AbandonAfter int
	// MaxRetryAfter caps the retry_after a module may ask for (a policy's
	// wait, an adapter's classification).
	MaxRetryAfter time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxConcurrency <= 0 {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	if c.ControllerConcurrency <= 0 {
		c.ControllerConcurrency = DefaultControllerConcurrency
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = c.BackoffBase
	}
	if c.Jitter == 0 {
		c.Jitter = DefaultJitter
	}
	if c.Jitter < 0 {
		c.Jitter = 0
	}
	if c.Jitter > 1 {
		c.Jitter = 1
	}
	if c.MaxAttempts < 0 {
		c.MaxAttempts = 0
	}
	if c.AbandonAfter <= 0 {
		c.AbandonAfter = DefaultAbandonAfter
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if c.StuckAfter <= 0 {
		c.StuckAfter = DefaultStuckAfter
	}
	if c.CSITimeout <= 0 {
		c.CSITimeout = DefaultCSITimeout
	}
	if c.GCInterval <= 0 {
		c.GCInterval = DefaultGCInterval
	}
	if c.GCThreshold <= 0 {
		c.GCThreshold = DefaultGCThreshold
	}
	if c.AutoForceAfter <= 0 {
		c.AutoForceAfter = DefaultAutoForceAfter
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.VolumeRateLimit > 0 && c.VolumeRateBurst <= 0 {
		c.VolumeRateBurst = 1
	}
	if c.Metrics == nil {
		c.Metrics = NopMetrics{}
	}
	return c
}

// Metrics is the hook the host's Prometheus collector implements. Calls are
// made synchronously from concurrent release passes: implementations must be
// safe for concurrent use, cheap, and must not block.
type Metrics interface {
	// ClaimReleased: a claim reached ready-to-free (and left the volume).
	ClaimReleased(ref structs.VolumeRef, allocID string)
	// AttemptFailed: a release step failed; e is what the claim now carries.
	AttemptFailed(ref structs.VolumeRef, allocID string, e *structs.ClaimError)
	// VolumeStuck: a volume was marked stuck (s != nil) or cleared (s == nil).
	VolumeStuck(ref structs.VolumeRef, s *structs.Stuck)
	// VolumeAssessed: a pass over the volume finished (whatever it did).
	VolumeAssessed(ref structs.VolumeRef)
}

// AutoForceMetrics is optionally implemented by a Metrics to count
// automatic force-deregistrations (escape hatch).
type AutoForceMetrics interface {
	AutoForceDeregistered()
}

// NopMetrics discards every event. Embed it to implement part of Metrics.
type NopMetrics struct{}

// ClaimReleased implements Metrics.
func (NopMetrics) ClaimReleased(structs.VolumeRef, string) {}

// AttemptFailed implements Metrics.
func (NopMetrics) AttemptFailed(structs.VolumeRef, string, *structs.ClaimError) {}

// VolumeStuck implements Metrics.
func (NopMetrics) VolumeStuck(structs.VolumeRef, *structs.Stuck) {}

// VolumeAssessed implements Metrics.
func (NopMetrics) VolumeAssessed(structs.VolumeRef) {}
