package csi

import (
	"os"
	"path/filepath"
	"testing"
)

// A call on a cached connection takes its reference without parsing the
// endpoint again: a URL parse and its allocations on every CSI call of a
// release for an endpoint parsed when it was dialled.
func TestAcquireCachedAllocatesNothing(t *testing.T) {
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c := New(Config{})
	t.Cleanup(func() { _ = c.Close() })
	// grpc.NewClient dials nothing until a call: no server needed.
	ep := "unix://" + filepath.Join(dir, "csi.sock")
	cn, err := c.acquire(ep)
	if err != nil {
		t.Fatal(err)
	}
	c.release(ep, cn, false)
	if n := testing.AllocsPerRun(100, func() {
		cn, err := c.acquire(ep)
		if err != nil {
			t.Fatal(err)
		}
		c.release(ep, cn, false)
	}); n != 0 {
		t.Errorf("acquire and release of a cached connection: %v allocations, want 0", n)
	}
	if _, err := c.acquire("http://not-a-csi-endpoint"); err == nil {
		t.Error("a bad endpoint was accepted")
	}
}
