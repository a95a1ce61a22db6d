//go:build linux

package plugins

import (
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// linearMemoryAllocator backs each instance's linear memory with its own
// anonymous mapping of the memory's maximum size (the manifest's
// limits.memory_pages at most), outside the Go heap. The kernel commits a
// page only when the guest first touches it, and hands it over zeroed.
//
// Without it wazero allocates the memory on the Go heap, with the capacity
// reserved up front (WithMemoryCapacityFromMax) so that memory.grow never
// copies. Every instance then counted its whole limit, touched or not, in
// the agent's heap: a pool of 4 Go guests at 256 pages held 64 MiB of
// heap for a few MiB of guest data, which moved the collector's pacing and
// counted against GOMEMLIMIT (README "Production agent"); and a replaced
// instance's memory, reused for the next one, was cleared whole by the
// allocator (4 MiB to 64 MiB of writes per instance, every max_calls
// calls). Here an instance costs what its guest touches, its address never
// moves as it grows (to the maximum, as before), and its pages go back to
// the kernel when it closes (TestLinearMemoryOutsideGoHeap, BenchmarkInstantiate).
//
// The mapping is unmapped when wazero closes the module. The host never
// keeps a view of guest memory past a call (responses and log lines are
// copied out, generation.exchange) and never closes an instance or a
// runtime with a call in flight (generation.acquire/release), so nothing
// reads an unmapped page.
var linearMemoryAllocator experimental.MemoryAllocator = experimental.MemoryAllocatorFunc(allocateLinearMemory)

// allocateLinearMemory maps max bytes. A memory whose maximum is 0 pages
// needs no mapping; if the kernel refuses one (address space or overcommit
// limits), the memory is wazero's own Go heap slice, as without this
// allocator: the same semantics, only the accounting of before.
func allocateLinearMemory(capacity, max uint64) experimental.LinearMemory {
	if max == 0 {
		return &heapMemory{}
	}
	b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		return &heapMemory{b: make([]byte, 0, capacity), max: max}
	}
	return &mappedMemory{b: b[:0]}
}

// mappedMemory is a linear memory in its own mapping; cap(b) is the maximum.
type mappedMemory struct{ b []byte }

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.b)) {
		return nil // past the maximum: memory.grow fails (returns -1)
	}
	m.b = m.b[:size]
	return m.b
}

func (m *mappedMemory) Free() {
	if m.b != nil {
		_ = syscall.Munmap(m.b[:cap(m.b)])
		m.b = nil
	}
}

// heapMemory is a linear memory on the Go heap, as wazero allocates one
// itself: the fallback of linearMemoryAllocator and a memory of 0 pages.
// Growing past its capacity copies into a larger slice, up to max.
type heapMemory struct {
	b   []byte
	max uint64
}

func (m *heapMemory) Reallocate(size uint64) []byte {
	switch {
	case size > m.max:
		return nil
	case size > uint64(cap(m.b)):
		grown := make([]byte, size, max(size, min(2*uint64(cap(m.b)), m.max)))
		copy(grown, m.b)
		m.b = grown
	default:
		m.b = m.b[:size]
	}
	return m.b
}

func (m *heapMemory) Free() { m.b = nil }
