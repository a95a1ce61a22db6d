package state

import (
	"bytes"
	"io"
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

// limitReader reports the soft memory limit in effect while the restore
// reads its stream.
type limitReader struct {
	r    io.Reader
	seen []int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	l.seen = append(l.seen, debug.SetMemoryLimit(-1))
	return l.r.Read(p)
}

// TestRestoreLiftsMemoryLimit: a restore runs without the soft memory
// limit (two states are live while it runs, so a limit near one state's
// size made a 1,000,000-volume restore 17 s instead of 11) and puts it back
// when it ends, whether the stream was good or not.
func TestRestoreLiftsMemoryLimit(t *testing.T) {
	const limit = 3 << 30
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))

	var good bytes.Buffer
	if err := richFixture(t).s.Persist(&good); err != nil {
		t.Fatal(err)
	}
	for name, stream := range map[string]string{"good stream": good.String(), "bad stream": good.String()[:good.Len()-20]} {
		t.Run(name, func(t *testing.T) {
			r := &limitReader{r: strings.NewReader(stream)}
			err := NewStore().Restore(r)
			if (err == nil) != (name == "good stream") {
				t.Fatalf("restore: %v", err)
			}
			if len(r.seen) == 0 {
				t.Fatal("the restore never read its stream")
			}
			for _, l := range r.seen {
				if l != math.MaxInt64 {
					t.Fatalf("limit while restoring = %d, want none (%d)", l, int64(math.MaxInt64))
				}
			}
			if got := debug.SetMemoryLimit(-1); got != limit {
				t.Fatalf("limit after the restore = %d, want %d back", got, limit)
			}
		})
	}
}

// TestOverlappingLiftsRestoreOnce: the limit comes back when the last of
// overlapping restores ends, not the first (which would leave the other
// running under it) and not never (which the second lift saving the
// first's "no limit" would do).
func TestOverlappingLiftsRestoreOnce(t *testing.T) {
	const limit = 5 << 30
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))

	first := liftMemoryLimit()
	second := liftMemoryLimit()
	first()
	first() // a second call is a no-op
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit with one restore still running = %d, want none", got)
	}
	second()
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Fatalf("limit after both = %d, want %d", got, limit)
	}
}

// TestSetMemoryLimitDuringRestore: a limit set while a restore lifts the
// limit leaves the lift in place and is the limit the restore puts back.
func TestSetMemoryLimitDuringRestore(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(5 << 30))
	end := liftMemoryLimit()
	SetMemoryLimit(3 << 30)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit during the restore = %d, want none", got)
	}
	end()
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Fatalf("limit after the restore = %d, want the one set during it (%d)", got, int64(3<<30))
	}
	SetMemoryLimit(4 << 30)
	if got := debug.SetMemoryLimit(-1); got != 4<<30 {
		t.Fatalf("limit set with no restore = %d, want %d", got, int64(4<<30))
	}
}
