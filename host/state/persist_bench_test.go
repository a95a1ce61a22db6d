package state

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// persistBenchBytes is the snapshot the persist benchmarks restore: of
// VOLHOST_SCALE_VOLUMES volumes (default 200,000; a tenth claimed, a
// hundredth releasable) as BenchmarkScale builds them, or the file
// VOLHOST_PERSIST_SNAPSHOT names when it exists (written there otherwise),
// so a profile of one benchmark is not mostly the build's. The built store
// is dropped: a restore runs as on a restarted server, beside no other
// state.
var persistBenchBytes = sync.OnceValue(func() []byte {
	path := os.Getenv("VOLHOST_PERSIST_SNAPSHOT")
	if path != "" {
		if raw, err := os.ReadFile(path); err == nil {
			return raw
		}
	}
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("VOLHOST_SCALE_VOLUMES")); err == nil && v >= 1000 {
		n = v
	}
	var buf bytes.Buffer
	if err := bulkLoad(&testing.B{}, shapeOf(n)).Persist(&buf); err != nil {
		panic(err)
	}
	if path != "" {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			panic(err)
		}
	}
	runtime.GC()
	return buf.Bytes()
})

// persistBenchStore is that snapshot restored: the state BenchmarkPersist
// saves, laid out in memory as on a restarted server.
var persistBenchStore = sync.OnceValue(func() *Store {
	s := NewStore()
	if err := s.Restore(bytes.NewReader(persistBenchBytes())); err != nil {
		panic(err)
	}
	return s
})

// BenchmarkPersist: one snapshot save of the state to memory (what raft's
// snapshot and `operator snapshot save` encode), without the disk.
//
//	VOLHOST_SCALE_VOLUMES=200000 go test -run '^$' -bench '^BenchmarkPersist$' -benchtime 5x ./host/state/
func BenchmarkPersist(b *testing.B) {
	s, raw := persistBenchStore(), persistBenchBytes()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	cpu := rusageCPU(b)
	for b.Loop() {
		if err := s.Persist(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkRestore: one restore of that snapshot from memory into a new
// store (what a restart and a follower installing a snapshot pay).
func BenchmarkRestore(b *testing.B) {
	raw := persistBenchBytes()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	cpu := rusageCPU(b)
	for b.Loop() {
		if err := NewStore().Restore(bytes.NewReader(raw)); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// reportCPU reports the process's CPU per operation since since (every
// goroutine's, the collector's included): on a machine shared with other
// work the wall time varies with their load, the CPU much less.
func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric((rusageCPU(b)-since).Seconds()/float64(b.N), "cpu-s/op")
}
