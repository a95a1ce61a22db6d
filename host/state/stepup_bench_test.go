package state

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
)

// BenchmarkStepUpRealStore (BENCHMARKS.md's target "step-up to all assessed"):
// leader step-up of the watcher (native policy, CSI calls answered at once)
// over this package's store holding the scale shape (bulkLoad:
// VOLHOST_SCALE_VOLUMES volumes, default 1,000,000; a tenth claimed, a
// hundredth releasable). Where watcher.BenchmarkStepUp reads a fake store,
// this one reads the real one: ReleasableVolumes, the blocking feed's first
// batch (every volume), each volume, alloc, node and plugin, and its
// checkpoints are applied by the store's FSM path (ApplyAt, one entry per
// checkpoint in write order: the log without raft, so the figure is the
// store's and the watcher's, not the consensus').
//
//	VOLHOST_SCALE_VOLUMES=1000000 go test -run '^$' -bench '^BenchmarkStepUpRealStore$' -benchtime 1x -timeout 30m ./host/state/
//
// The state is built once; each of VOLHOST_STEPUP_ROUNDS (default 5)
// step-ups runs over a copy of it (cloneStore). Reported, the median of
// the rounds: stepup-assessed-s, step-up until every releasable volume
// has been assessed once and the feed's first batch read through;
// stepup-released-s, until every releasable claim is gone.
// VOLHOST_SCALE_OUT and VOLHOST_SCALE_JSON, when set, name the files
// BenchmarkScale wrote for the same shape: the figures are added to them.
func BenchmarkStepUpRealStore(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("VOLHOST_SCALE_VOLUMES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("VOLHOST_SCALE_VOLUMES=%q: want an integer >= 1000", v)
		}
	}
	rounds := 5
	if v := os.Getenv("VOLHOST_STEPUP_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("VOLHOST_STEPUP_ROUNDS=%q: want a positive integer", v)
		}
	}
	shape := shapeOf(n)
	b.StopTimer()
	for range b.N {
		built := bulkLoad(b, shape)
		var assessed, released []float64
		for range rounds {
			a, r := stepUpOnce(b, cloneStore(built), shape)
			assessed, released = append(assessed, a.Seconds()), append(released, r.Seconds())
		}
		rows := []scaleRow{
			{"stepup-assessed-s", "watcher step-up over this store, until every releasable volume is assessed (s; bound 10)", assessed},
			{"stepup-released-s", "the same, until every releasable claim is released (s)", released},
		}
		for _, r := range rows {
			b.ReportMetric(r.median(), r.key)
		}
		addScaleFigures(b, rows)
		b.Logf("%d volumes, %d claimed, %d releasable, %d rounds: all assessed %s s, all released %s s",
			shape.volumes, shape.claimed, shape.releasable, rounds, rows[0].spread(), rows[1].spread())
	}
}

// stepUpOnce runs one leader step-up of a watcher over s, timed, and
// returns how long it took until every releasable volume was assessed
// (and the feed's first batch read through) and until every releasable
// claim was released. Each round starts after a full GC, so no round
// inherits the previous one's garbage; the collections its own work
// causes are part of its time, as on a server.
func stepUpOnce(b *testing.B, s *Store, shape scaleShape) (assessed, released time.Duration) {
	// An earlier round's writes must not have reached this copy.
	if r, _ := s.Snapshot().ReleasableVolumes(nil); len(r) != shape.releasable {
		b.Fatalf("%d volumes releasable before step-up, want %d", len(r), shape.releasable)
	}
	feed := &firstBatchFeed{Store: s, read: make(chan struct{})}
	m := newStepUpMetrics(shape.releasable)
	w := watcher.New(watcher.Config{Clock: clockwork.NewRealClock(), Metrics: m},
		watcher.Deps{Feed: feed, State: s.Reader(), Writer: &directWriter{s: s, idx: s.LatestIndex()},
			Node: nopCSI{}, Controller: nopCSI{}}, hclog.NewNullLogger())
	runtime.GC()
	b.StartTimer()
	start := time.Now()
	w.SetEnabled(true)
	<-m.assessed
	<-feed.read
	assessed = time.Since(start)
	<-m.released
	released = time.Since(start)
	b.StopTimer()
	w.SetEnabled(false)
	if r, _ := s.Snapshot().ReleasableVolumes(nil); len(r) != 0 {
		b.Fatalf("%d volumes still releasable after step-up", len(r))
	}
	return assessed, released
}

// cloneStore is a store of its own holding s's current state, for a
// benchmark that runs several step-ups from one built state: memdb's
// Snapshot shares the immutable trees and copies what is written, and
// the store never changes a stored object in place, so the clone's writes
// leave s as it was.
func cloneStore(s *Store) *Store {
	c := &Store{cfg: s.cfg, logger: s.logger, events: s.events}
	c.cur.Store(&dbState{db: s.cur.Load().db.Snapshot(), abandon: make(chan struct{})})
	return c
}

// stepUpMetrics closes assessed when want distinct volumes have been
// assessed and released when want claims have been released.
type stepUpMetrics struct {
	watcher.NopMetrics
	want               int
	mu                 sync.Mutex
	seen               map[structs.VolumeRef]bool
	releases           int
	assessed, released chan struct{}
}

func newStepUpMetrics(want int) *stepUpMetrics {
	return &stepUpMetrics{want: want, seen: make(map[structs.VolumeRef]bool, want),
		assessed: make(chan struct{}), released: make(chan struct{})}
}

func (m *stepUpMetrics) VolumeAssessed(ref structs.VolumeRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.seen[ref] {
		if m.seen[ref] = true; len(m.seen) == m.want {
			close(m.assessed)
		}
	}
}

func (m *stepUpMetrics) ClaimReleased(structs.VolumeRef, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.releases++; m.releases == m.want {
		close(m.released)
	}
}

// firstBatchFeed closes read when the watcher asks for what follows the
// first batch: it has looked through every volume the batch held.
type firstBatchFeed struct {
	*Store
	once sync.Once
	read chan struct{}
}

func (f *firstBatchFeed) VolumesChangedSince(ctx context.Context, index uint64) ([]*structs.Volume, uint64, error) {
	if index > 0 {
		f.once.Do(func() { close(f.read) })
	}
	return f.Store.VolumesChangedSince(ctx, index)
}

// directWriter applies the watcher's writes through the store's FSM path,
// one entry each at the next index.
type directWriter struct {
	mu  sync.Mutex
	s   *Store
	idx uint64
}

func (d *directWriter) apply(t structs.MessageType, req any) (uint64, any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.idx++
	resp, err := d.s.ApplyAt(d.idx, time.Now(), t, req)
	return d.idx, resp, err
}

func (d *directWriter) CheckpointClaim(_ context.Context, req *structs.ClaimCheckpointRequest) (uint64, error) {
	idx, _, err := d.apply(structs.ClaimCheckpointType, req)
	return idx, err
}

func (d *directWriter) MarkStuck(_ context.Context, req *structs.VolumeStuckRequest) (uint64, error) {
	idx, _, err := d.apply(structs.VolumeStuckType, req)
	return idx, err
}

func (d *directWriter) GCClaims(_ context.Context, req *structs.ClaimGCRequest) (uint64, error) {
	idx, _, err := d.apply(structs.ClaimGCType, req)
	return idx, err
}

func (d *directWriter) ForceDeregister(_ context.Context, req *structs.VolumeDeregisterRequest) ([]*structs.Leftover, error) {
	r := *req
	r.Force = true
	_, resp, err := d.apply(structs.VolumeDeregisterType, &r)
	if err != nil {
		return nil, err
	}
	ls, _ := resp.([]*structs.Leftover)
	return ls, nil
}

// nopCSI answers every CSI call OK at once.
type nopCSI struct{}

func (nopCSI) NodeUnpublishVolume(context.Context, string, *csipb.NodeUnpublishVolumeRequest) error {
	return nil
}

func (nopCSI) NodeUnstageVolume(context.Context, string, *csipb.NodeUnstageVolumeRequest) error {
	return nil
}

func (nopCSI) ControllerUnpublishVolume(context.Context, string, *csipb.ControllerUnpublishVolumeRequest) error {
	return nil
}
