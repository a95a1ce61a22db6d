package plugins

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
)

// TestLinearMemoryMapping: the allocator maps the maximum, grows in place
// up to it and refuses past it; a maximum of 0 pages maps nothing; a
// mapping the kernel refuses (here 1 PiB, past the address space) falls
// back to a Go heap slice that still grows to its maximum.
func TestLinearMemoryMapping(t *testing.T) {
	m, ok := allocateLinearMemory(0, 4*pageSize).(*mappedMemory)
	if !ok {
		t.Fatal("a 4-page maximum is not mapped")
	}
	b := m.Reallocate(pageSize)
	b[0] = 7
	grown := m.Reallocate(4 * pageSize)
	if len(grown) != 4*pageSize || &grown[0] != &b[0] || grown[0] != 7 {
		t.Fatalf("grown to %d bytes, moved %v, content %d", len(grown), &grown[0] != &b[0], grown[0])
	}
	if m.Reallocate(4*pageSize+1) != nil {
		t.Fatal("grew past the maximum")
	}
	m.Free()
	m.Free() // a second Free is harmless

	if _, ok := allocateLinearMemory(0, 0).(*heapMemory); !ok {
		t.Fatal("a 0-page memory got a mapping")
	}
	const huge = 1 << 50
	h, ok := allocateLinearMemory(pageSize, huge).(*heapMemory)
	if !ok {
		t.Skip("the kernel mapped 1 PiB: no refusal to fall back from")
	}
	if got := h.Reallocate(2 * pageSize); len(got) != 2*pageSize {
		t.Fatalf("the fallback grew to %d bytes", len(got))
	}
}

// TestLinearMemoryOutsideGoHeap: a pool of instances whose memory_pages
// allow 64 MiB each adds to the Go heap what the host keeps per instance,
// not the 64 MiB. Before linearMemoryAllocator each instance reserved its
// whole limit on the Go heap (4 instances: 256 MiB of heap for 4 pages of
// guest data), which the collector paced by and GOMEMLIMIT counted.
func TestLinearMemoryOutsideGoHeap(t *testing.T) {
	const pool, pages = 4, maxReservedPages // 64 MiB per instance
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "h", newHmod().build(), manifest("release-policy",
			fmt.Sprintf("limits {\n  memory_pages = %d\n  pool_size = %d\n}", pages, pool)))
	}, nil)
	g := (*e.m.modules.Load())["h"].cur.Load()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	ctx := context.Background()
	before := heap()
	var held []*instance
	for range pool {
		inst, err := g.checkout(ctx) // the canary first, then new instances
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, inst)
	}
	after := heap()
	grown := after - min(before, after)
	for _, inst := range held {
		if inst.mem.Size() != pageSize {
			t.Fatalf("instance memory %d bytes, want the module's 1 page", inst.mem.Size())
		}
	}
	for _, inst := range held {
		g.checkin(inst, false)
	}
	const bound = 8 << 20
	t.Logf("%d instances of %d-page limit: Go heap +%d KiB", pool, pages, grown>>10)
	if grown > bound {
		t.Fatalf("%d instances grew the Go heap by %d MiB (limit %d MiB each): their memory is on the heap", pool, grown>>20, pages*pageSize>>20)
	}
}

// TestGuestMemoryMappedAboveReserve: with the memory mapped at its maximum,
// a limit above maxReservedPages (which the Go heap fallback would grow by
// copying) keeps its address too while the guest's heap grows.
func TestGuestMemoryMappedAboveReserve(t *testing.T) {
	addr, pages, addr2, pages2 := growAndWatch(t, 2*maxReservedPages)
	if pages2 <= pages {
		t.Fatalf("memory did not grow (%d pages): the test no longer exercises memory.grow", pages2)
	}
	if addr2 != addr {
		t.Fatalf("memory moved when it grew from %d to %d pages (limit %d)", pages, pages2, 2*maxReservedPages)
	}
}

// TestHeapMemory is the fallback allocator's contract with wazero:
// Reallocate returns the memory at the size asked, keeping what was
// written, and nil past the maximum.
func TestHeapMemory(t *testing.T) {
	m := &heapMemory{b: make([]byte, 0, 2), max: 8}
	b := m.Reallocate(2)
	copy(b, "ab")
	for _, tc := range []struct {
		size uint64
		nil  bool
	}{{1, false}, {4, false}, {8, false}, {9, true}, {3, false}} {
		got := m.Reallocate(tc.size)
		if (got == nil) != tc.nil || (!tc.nil && uint64(len(got)) != tc.size) {
			t.Fatalf("Reallocate(%d) = %d bytes (nil %v)", tc.size, len(got), got == nil)
		}
		if !tc.nil && !bytes.HasPrefix(got, []byte("a")) {
			t.Fatalf("Reallocate(%d) lost the content: %q", tc.size, got)
		}
	}
	if got := (&heapMemory{}).Reallocate(0); len(got) != 0 {
		t.Fatalf("a 0-page memory: %d bytes", len(got))
	}
	if got := (&heapMemory{}).Reallocate(1); got != nil {
		t.Fatal("a 0-page memory grew")
	}
}
