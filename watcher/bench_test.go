package watcher

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"

	"github.com/volhost/volhost/host/structs"
)

// benchMetrics signals when a number of claims has been released.
type benchMetrics struct {
	NopMetrics
	released atomic.Int64
	target   int64
	done     chan struct{}
}

func (m *benchMetrics) ClaimReleased(structs.VolumeRef, string) {
	if m.released.Add(1) == m.target {
		close(m.done)
	}
}

// latencyCSI answers every call OK after a fixed latency (0: at once).
type latencyCSI struct{ latency time.Duration }

func (l latencyCSI) wait(ctx context.Context) error {
	if l.latency <= 0 {
		return nil
	}
	t := time.NewTimer(l.latency)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l latencyCSI) NodeUnpublishVolume(ctx context.Context, _ string, _ *csipb.NodeUnpublishVolumeRequest) error {
	return l.wait(ctx)
}

func (l latencyCSI) NodeUnstageVolume(ctx context.Context, _ string, _ *csipb.NodeUnstageVolumeRequest) error {
	return l.wait(ctx)
}

func (l latencyCSI) ControllerUnpublishVolume(ctx context.Context, _ string, _ *csipb.ControllerUnpublishVolumeRequest) error {
	return l.wait(ctx)
}

// benchStore builds a store with total volumes, of which releasable have a
// claim whose allocation completed; the others' allocation runs.
func benchStore(total, releasable int) *fakeStore {
	s := newFakeStore()
	s.noRecord = true
	s.plugins[testPlugin] = &structs.Plugin{ID: testPlugin, ControllerEndpoint: ctlEP,
		Capabilities: structs.ControllerCapabilities{PublishUnpublish: true}}
	for i := range 64 {
		n := readyNode(fmt.Sprintf("n%d", i))
		s.nodes[n.ID] = n
	}
	for i := range total {
		id := fmt.Sprintf("v%06d", i)
		node := fmt.Sprintf("n%d", i%64)
		status := structs.AllocRunning
		if i < releasable {
			status = structs.AllocComplete
		}
		s.allocs["a-"+id] = &structs.Alloc{ID: "a-" + id, NodeID: node, ClientStatus: status, ModifyTime: t0}
		v := newVolume(id, newClaim("a-"+id, node, structs.ClaimTaken))
		s.index++
		v.ModifyIndex = s.index
		s.vols[structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}] = v
	}
	return s
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// waitIdle waits for the watcher's workers to finish (benchmarks only).
func waitIdle(b *testing.B, w *Watcher) {
	deadline := time.Now().Add(5 * time.Minute)
	for !w.idle() {
		if time.Now().After(deadline) {
			b.Fatal("watcher never went idle")
		}
		<-time.After(time.Millisecond)
	}
}

// BenchmarkStepUp: leader step-up with 100,000 volumes of which 10,000 have
// a releasable claim, until every releasable volume is assessed (here:
// released). Reports goroutines and the watcher's heap while idle.
func BenchmarkStepUp(b *testing.B) {
	const total, releasable = 100_000, 10_000
	for _, tc := range []struct {
		name  string
		limit rate.Limit
	}{
		{"unlimited", 0},
		// The reference system's per-volume limiter (1/s, burst 3).
		{"rate=1/s-burst=3", 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var goroutines, heap, tracked float64
			for range b.N {
				b.StopTimer()
				store := benchStore(total, releasable)
				m := &benchMetrics{target: releasable, done: make(chan struct{})}
				w := New(Config{Clock: clockwork.NewRealClock(), Metrics: m, VolumeRateLimit: tc.limit, VolumeRateBurst: 3},
					Deps{Feed: store, State: store, Writer: store, Node: latencyCSI{}, Controller: latencyCSI{}},
					hclog.NewNullLogger())
				g0, h0 := runtime.NumGoroutine(), heapInUse()
				b.StartTimer()
				w.SetEnabled(true)
				<-m.done
				// Assessed means also that the blocking query's first batch
				// (the whole table) has been looked through.
				for w.feedIndex.Load() == 0 {
					<-time.After(time.Millisecond)
				}
				b.StopTimer()
				waitIdle(b, w)
				goroutines = float64(runtime.NumGoroutine() - g0)
				h1 := heapInUse()
				heap = float64(int64(h1) - int64(h0))
				tracked = float64(w.trackedVolumes())
				w.SetEnabled(false)
			}
			b.ReportMetric(goroutines, "goroutines-idle")
			b.ReportMetric(heap/(1<<20), "watcher-heap-MB")
			b.ReportMetric(tracked, "tracked-volumes")
		})
	}
}

// BenchmarkReleaseThroughput: claims fully released (taken -> removed, three
// CSI calls and three checkpoints each) per second, by controller
// concurrency, against a CSI fake with no latency or 1 ms per call.
func BenchmarkReleaseThroughput(b *testing.B) {
	for _, latency := range []time.Duration{0, time.Millisecond} {
		for _, ctl := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("latency=%s/ctl=%d", latency, ctl), func(b *testing.B) {
				b.StopTimer()
				store := benchStore(b.N, b.N)
				m := &benchMetrics{target: int64(b.N), done: make(chan struct{})}
				w := New(Config{Clock: clockwork.NewRealClock(), Metrics: m, ControllerConcurrency: ctl},
					Deps{Feed: store, State: store, Writer: store, Node: latencyCSI{latency}, Controller: latencyCSI{latency}},
					hclog.NewNullLogger())
				start := time.Now()
				b.StartTimer()
				w.SetEnabled(true)
				<-m.done
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
				w.SetEnabled(false)
			})
		}
	}
}
