package state

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/structs"
)

type queryResult struct {
	index uint64
	vols  []*structs.Volume
	err   error
}

// startQuery runs a blocking query over "volumes modified since min" in a
// goroutine; runs receives a value every time fn ran.
func startQuery(ctx context.Context, s *Store, min uint64, maxWait time.Duration) (runs chan uint64, done chan queryResult) {
	runs = make(chan uint64, 100)
	done = make(chan queryResult, 1)
	go func() {
		var vols []*structs.Volume
		idx, err := s.BlockingQuery(ctx, min, maxWait, func(ws memdb.WatchSet, snap *Snapshot) (uint64, error) {
			var err error
			if vols, err = snap.VolumesModifiedSince(ws, min); err != nil {
				return 0, err
			}
			idx, err := snap.Index(TableVolumes)
			runs <- idx
			return idx, err
		})
		done <- queryResult{idx, vols, err}
	}()
	return runs, done
}

func waitResult(t *testing.T, done chan queryResult) queryResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		t.Fatal("blocking query did not return")
	}
	return queryResult{}
}

func waitRun(t *testing.T, runs chan uint64) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case i := <-runs:
		return i
	case <-ctx.Done():
		t.Fatal("query function never ran")
	}
	return 0
}

func assertPending(t *testing.T, done chan queryResult) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("blocking query returned early: %+v", r)
	default:
	}
}

func TestBlockingQueryWakesOnWrite(t *testing.T) {
	f := newFixture(t)
	min := f.index(TableVolumes)
	runs, done := startQuery(context.Background(), f.s, min, time.Hour)
	if got := waitRun(t, runs); got != min {
		t.Fatalf("first run saw %d, want %d", got, min)
	}
	// A write to another table does not end the query.
	f.must(structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: "t"}}})
	assertPending(t, done)
	f.claim("vol-ms", "a1", structs.ClaimWrite)
	r := waitResult(t, done)
	if r.err != nil || r.index != f.idx || len(r.vols) != 1 || r.vols[0].ID != "vol-ms" {
		t.Fatalf("result %+v (want index %d, vol-ms)", r, f.idx)
	}
}

func TestBlockingQueryTimesOutAtMaxWait(t *testing.T) {
	f := newFixture(t)
	min := f.index(TableVolumes)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, done := startQuery(context.Background(), f.s, min, 30*time.Second)
	waitRun(t, runs)
	if err := f.clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(29 * time.Second)
	assertPending(t, done)
	f.clk.Advance(time.Second)
	r := waitResult(t, done)
	if r.err != nil || r.index != min {
		t.Fatalf("timeout result %+v, want index %d and no error", r, min)
	}
}

func TestBlockingQueryCancel(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	runs, done := startQuery(ctx, f.s, f.index(TableVolumes), time.Hour)
	waitRun(t, runs)
	cancel()
	if r := waitResult(t, done); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %+v", r)
	}
}

func TestBlockingQueryZeroRunsOnce(t *testing.T) {
	f := newFixture(t)
	runs, done := startQuery(context.Background(), f.s, 0, time.Hour)
	r := waitResult(t, done)
	if r.err != nil || r.index != f.index(TableVolumes) || len(r.vols) != 5 || len(runs) != 1 {
		t.Fatalf("result %+v after %d runs", r, len(runs))
	}
}

// Restore replaces the database: queries waiting on the old one rerun.
func TestBlockingQueryWakesOnRestore(t *testing.T) {
	f := newFixture(t)
	min := f.index(TableVolumes)
	other := newFixture(t)
	other.claim("vol-sw", "a1", structs.ClaimWrite)
	var buf bytesBuffer
	if err := other.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	runs, done := startQuery(context.Background(), f.s, min, time.Hour)
	waitRun(t, runs)
	if err := f.s.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, done)
	if r.err != nil || r.index != other.idx {
		t.Fatalf("result %+v, want index %d", r, other.idx)
	}
}

// The watcher's feed: index 0 on a never-written table blocks instead of
// spinning, then returns only what moved.
func TestVolumesChangedSince(t *testing.T) {
	f := newEmpty(t)
	type res struct {
		vols []*structs.Volume
		idx  uint64
		err  error
	}
	done := make(chan res, 1)
	go func() {
		v, i, err := f.s.VolumesChangedSince(context.Background(), 0)
		done <- res{v, i, err}
	}()
	b := loadBase(t)
	f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: b.Plugins[0]})
	select {
	case r := <-done:
		t.Fatalf("returned before any volume write: %+v", r)
	default:
	}
	f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: b.Plugins[1]})
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: b.Volumes})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var r res
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("feed never returned")
	}
	if r.err != nil || r.idx != f.idx || len(r.vols) != 5 {
		t.Fatalf("got %d volumes at %d (%v), want 5 at %d", len(r.vols), r.idx, r.err, f.idx)
	}
	for _, n := range []string{"n1", "n2"} {
		f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: b.Nodes[map[string]int{"n1": 0, "n2": 1}[n]]})
	}
	f.must(structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: "vol-ro"}}})
	vols, idx, err := f.s.VolumesChangedSince(ctx, r.idx)
	if err != nil || idx != f.idx || len(vols) != 1 || vols[0].ID != "vol-ro" {
		t.Fatalf("second call: %v at %d (%v)", vols, idx, err)
	}
}

// Many feeds follow a stream of writes concurrently (run with -race): each
// sees its index only grow, never misses the last write, and every volume
// it is handed really moved past the index it asked from.
func TestConcurrentFeedsFollowWrites(t *testing.T) {
	f := newFixture(t)
	const writes, readers = 50, 6
	final := f.idx + writes
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, readers)
	for r := 0; r < readers; r++ {
		go func() {
			var idx uint64
			for idx < final {
				vols, next, err := f.s.VolumesChangedSince(ctx, idx)
				if err != nil {
					errs <- err
					return
				}
				if next <= idx {
					errs <- fmt.Errorf("index went from %d to %d", idx, next)
					return
				}
				for _, v := range vols {
					if v.ModifyIndex <= idx {
						errs <- fmt.Errorf("volume %s at %d returned for since %d", v.ID, v.ModifyIndex, idx)
						return
					}
				}
				idx = next
			}
			errs <- nil
		}()
	}
	ids := []string{"vol-sw", "vol-mw", "vol-ms", "vol-ro", "vol-snr"}
	for i := 0; i < writes; i++ {
		f.must(structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: ids[i%len(ids)]}}})
	}
	for r := 0; r < readers; r++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("a feed never reached the last write")
		}
	}
}
