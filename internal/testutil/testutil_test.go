package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fatalRecorder records Fatalf instead of ending the goroutine.
type fatalRecorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msg = fmt.Sprintf(format, args...)
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	rec := &fatalRecorder{TB: t}
	WaitFor(rec, "three increments", func() bool { return n.Load() == 3 })
	if rec.msg != "" {
		t.Fatalf("WaitFor failed although the condition came to hold: %s", rec.msg)
	}
}

func TestWaitForCtxFailsNamingWhatItWaitedFor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := &fatalRecorder{TB: t}
	WaitForCtx(rec, ctx, "the impossible", func() bool { return false })
	if !strings.Contains(rec.msg, "timed out waiting for the impossible") {
		t.Fatalf("failure message %q does not name what was awaited", rec.msg)
	}
}

func TestSyncBufferConcurrentWrites(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Fatalf("%d bytes written, want 800", got)
	}
}

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Spread
	}{
		{[]float64{3}, Spread{3, 3, 3}},
		{[]float64{5, 1, 3}, Spread{3, 1, 5}},
		{[]float64{4, 1, 2, 3}, Spread{2.5, 1, 4}},
	} {
		if got := SpreadOf(tc.in); got != tc.want {
			t.Errorf("SpreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if got := (Spread{2.5, 1, 4}).String(); got != "2.5 [1-4]" {
		t.Errorf("String = %q", got)
	}
	if got := (Spread{4539, 4370, 5702}).Text("%.0f"); got != "4539 [4370-5702]" {
		t.Errorf("Text = %q", got)
	}
}

// Every index runs once, spread over the workers, and the first error
// comes back after all workers ended.
func TestFanOut(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	err := FanOut(4, 10, func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		seen[i]++
		return nil
	})
	if err != nil || len(seen) != 10 {
		t.Fatalf("err %v, indices %v", err, seen)
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("index %d ran %d times", i, n)
		}
	}
	boom := errors.New("boom")
	if err := FanOut(4, 10, func(i int) error {
		if i == 7 {
			return boom
		}
		return nil
	}); err != boom {
		t.Fatalf("err %v, want boom", err)
	}
}

func TestRSSMiB(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc/self/status")
	}
	if rss := RSSMiB(); rss <= 0 {
		t.Fatalf("RSS %v MiB", rss)
	}
}

// Sides alternate within each round: side 0, side 1, side 0, side 1.
func TestInterleaveAlternates(t *testing.T) {
	var order []int
	side := func(i int) func() float64 {
		return func() float64 { order = append(order, i); return float64(len(order)) }
	}
	got := Interleave(2, side(0), side(1))
	if want := []int{0, 1, 0, 1}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if !slices.Equal(got[0], []float64{1, 3}) || !slices.Equal(got[1], []float64{2, 4}) {
		t.Fatalf("figures %v", got)
	}
	if r := Ratios(got[1], got[0]); !slices.Equal(r, []float64{2, 4.0 / 3}) {
		t.Fatalf("ratios %v", r)
	}
}

// TestRepeat: f runs again and again until stop, which returns only once
// the call in flight has (no call after stop returns), or until f says
// false; stop twice is fine.
func TestRepeat(t *testing.T) {
	var n atomic.Int64
	stop := Repeat(func() bool { n.Add(1); return true })
	WaitFor(t, "a few calls", func() bool { return n.Load() >= 3 })
	stop()
	after := n.Load()
	stop()
	if n.Load() != after {
		t.Fatalf("%d calls after stop returned", n.Load()-after)
	}

	var m atomic.Int64
	stop = Repeat(func() bool { return m.Add(1) < 5 })
	WaitFor(t, "f to end the loop", func() bool { return m.Load() >= 5 })
	stop()
	if got := m.Load(); got != 5 {
		t.Fatalf("%d calls, want 5: the loop went on after f said false", got)
	}
}
