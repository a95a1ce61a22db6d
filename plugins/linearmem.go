package plugins

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
