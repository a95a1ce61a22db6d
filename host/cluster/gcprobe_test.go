package cluster

import (
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/state"
)

func probeCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scratch: a collection's CPU on a state built by applies against the same state restored.
func TestGCProbe(t *testing.T) {
	if os.Getenv("GC_PROBE") == "" {
		t.Skip()
	}
	gcs := func(label string) {
		for i := 0; i < 4; i++ {
			c0 := probeCPU()
			runtime.GC()
			ms := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/objects:objects"}}
			metrics.Read(ms)
			t.Logf("%s gc %d: cpu %.3f s, live %d MiB, %d objects", label, i, (probeCPU() - c0).Seconds(), ms[0].Value.Uint64()>>20, ms[1].Value.Uint64())
		}
	}
	f := &fsm{store: state.NewStore(), meta: newMeta(), logger: hclog.NewNullLogger()}
	buildScaleState(t, f, 1_000_000, 100_000)
	gcs("applied")
	var buf bytes.Buffer
	if err := f.store.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	f = nil
	s := state.NewStore()
	if err := s.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	buf = bytes.Buffer{}
	gcs("restored")
	runtime.KeepAlive(s)
}
