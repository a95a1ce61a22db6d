package snapshot

import (
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/volhost/volhost/host/state"
)

// BenchmarkWrite: an operator snapshot save of the state in the raft
// snapshot file VOLHOST_PERSIST_SNAPSHOT names (host/state's
// BenchmarkPersist writes one), to io.Discard: the encoding, sealing and
// checksum `operator snapshot save` pays, without the disk.
//
//	VOLHOST_PERSIST_SNAPSHOT=/tmp/snap200k.snap go test -run '^$' -bench '^BenchmarkWrite$' -benchtime 3x ./host/snapshot/
func BenchmarkWrite(b *testing.B) {
	path := os.Getenv("VOLHOST_PERSIST_SNAPSHOT")
	if path == "" {
		b.Skip("VOLHOST_PERSIST_SNAPSHOT names no snapshot file")
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	s := state.NewStore()
	err = s.Restore(f)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	kr := newKeyring(b)
	b.ReportAllocs()
	cpu := processCPU(b)
	for b.Loop() {
		if err := Write(io.Discard, Header{ClusterID: "c"}, s.Snapshot(), kr); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((processCPU(b)-cpu).Seconds()/float64(b.N), "cpu-s/op")
}

func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
