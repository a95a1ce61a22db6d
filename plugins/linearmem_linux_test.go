package plugins

import "testing"

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
