package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/internal/testutil"
)

// revocationRounds is how many revocations each figure is the median of.
const revocationRounds = 7

// BenchmarkRevocationNodeStream measures, on a real connection, how long
// after a node agent's token is revoked the server still accepts a step
// for it, and when the stream is closed: a loop sends node steps to the
// agent back to back; the token's deletion is issued (or the resolver's
// clock is moved to its expiry) at t0; applied is when that returned. last-accepted is the latest start of a
// step that then succeeded, minus t0 (negative: none started after t0
// was accepted); first-refused is when the first step failed; closed is
// when the server had dropped the stream (polled every 2 ms).
//
//	go test -run '^$' -bench Revocation -benchtime 1x ./host/client/ ./host/api/
func BenchmarkRevocationNodeStream(b *testing.B) {
	for _, kind := range []string{"delete", "expiry"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				var applied, accepted, refused, closed []float64
				for range revocationRounds {
					p, a, f, c := revokeOnce(b, kind)
					applied = append(applied, p)
					accepted = append(accepted, a)
					refused = append(refused, f)
					closed = append(closed, c)
				}
				testutil.ReportSpread(b, applied, "ms-applied")
				testutil.ReportSpread(b, accepted, "ms-last-accepted")
				testutil.ReportSpread(b, refused, "ms-first-refused")
				testutil.ReportSpread(b, closed, "ms-closed")
				b.Logf("%s: revocation applied %s ms, last step accepted %s ms, first refused %s ms, stream seen closed %s ms after t0 (median [min-max] of %d)",
					kind, testutil.SpreadOf(applied), testutil.SpreadOf(accepted), testutil.SpreadOf(refused), testutil.SpreadOf(closed), revocationRounds)
			}
		})
	}
}

func revokeOnce(b *testing.B, kind string) (appliedMs, lastAcceptedMs, firstRefusedMs, closedMs float64) {
	ttl := time.Duration(0)
	if kind == "expiry" {
		ttl = time.Hour
	}
	r := newACLRig(b, ttl, nil)
	ag := r.srv.Agent("n1")
	_, target := csi.Paths(r.root, "p", "default", "vol1", "alloc1")
	req := &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		last     time.Time
		refused  time.Time
		started  = make(chan struct{})
		startOne sync.Once
	)
	stop := testutil.Repeat(func() bool {
		t := time.Now()
		if err := ag.NodeUnpublishVolume(ctx, r.plugin.Endpoint(), req); err != nil {
			mu.Lock()
			refused = time.Now()
			mu.Unlock()
			return false // refused: nothing later is accepted on this agent
		}
		mu.Lock()
		last = t
		mu.Unlock()
		startOne.Do(func() { close(started) })
		return true
	})
	<-started
	t0 := time.Now()
	if kind == "expiry" {
		r.aclClock.Advance(time.Hour)
	} else if _, err := r.svc.DeleteToken(ctx, r.admin, r.accessor); err != nil {
		b.Fatal(err)
	}
	appliedAt := time.Now()
	testutil.WaitFor(b, "the revoked agent's stream to close", func() bool { return r.srv.Agent("n1") == nil })
	closedAt := time.Now()
	stop()
	mu.Lock()
	defer mu.Unlock()
	ms := func(t time.Time) float64 { return float64(t.Sub(t0).Microseconds()) / 1000 }
	return ms(appliedAt), ms(last), ms(refused), ms(closedAt)
}
