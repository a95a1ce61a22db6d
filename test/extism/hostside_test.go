package extism

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

// BenchmarkHostSide is one Go guest module, VOLHOST_HOST_WASM, called
// through plugins.Manager on the 8-claim volume, reporting the p50 and the
// mean of b.N calls: with the module held fixed, what differs between two
// builds of this package is the host's side of a call (VOLHOST_HOST_CTX,
// below, picks the caller's context). It is the
// benchmark scripts/bench-host-ab.sh runs in interleaved processes of a
// base tree and the work tree:
//
//	flock /tmp/volhost-heavy.lock bash scripts/bench-host-ab.sh main
func BenchmarkHostSide(b *testing.B) {
	path := os.Getenv("VOLHOST_HOST_WASM")
	if path == "" {
		b.Skip("set VOLHOST_HOST_WASM to a release-policy module")
	}
	m := newManager(b, path)
	req := volumeRequest()
	ctx := context.Background()
	// VOLHOST_HOST_CTX=cancel calls on a cancellable context, as the
	// watcher does (its leadership context): the host then watches the
	// caller's context for the call, which context.Background() skips.
	if os.Getenv("VOLHOST_HOST_CTX") == "cancel" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	for range 1000 { // the instance's heap and the caches warm
		if _, err := m.DecideRelease(ctx, "policy", req); err != nil {
			b.Fatal(err)
		}
	}
	durs := make([]time.Duration, 0, b.N)
	var sum time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := m.DecideRelease(ctx, "policy", req); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		durs = append(durs, d)
		sum += d
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(durs)), "mean-ns")
}
