package state

import (
	"bytes"
	"io"
	"runtime"
	"testing"
)

// A save allocates less than the stream it writes: the marshal
// batches' buffers are reused (persist_rows.go). Each batch growing its own
// output and json.Marshal copying every row allocated five times the
// stream, and the collector's work on it was most of a save's CPU.
func TestPersistAllocatesLessThanItWrites(t *testing.T) {
	if raceOn {
		t.Skip("allocation counts under the race detector are not the program's")
	}
	s := bulkLoad(t, shapeOf(20_000))
	var out bytes.Buffer
	if err := s.Persist(&out); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := s.Persist(io.Discard); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("save of %d bytes allocated %d bytes", out.Len(), alloc)
	if alloc > uint64(out.Len()) {
		t.Fatalf("save of %d bytes allocated %d bytes, more than the stream", out.Len(), alloc)
	}
}
