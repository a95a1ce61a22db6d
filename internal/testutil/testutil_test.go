package testutil

import (
	"context"
	"fmt"
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
