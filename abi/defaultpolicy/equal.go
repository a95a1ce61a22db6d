package defaultpolicy

// equal is a == b without the runtime's string comparison, which in a Go
// wasm guest compares one byte per loop iteration; under a host's call
// timeout every loop iteration exits the wasm code (ABI.md section 12), so
// confirming that two 36-character UUIDs match costs 37 exits. This
// compares 8 bytes per iteration, and strings shorter than 8 bytes without
// a loop.
func equal(a, b string) bool {
	n := len(a)
	if n != len(b) {
		return false
	}
	switch {
	case n >= 8:
		for i := 0; i+8 < n; i += 8 {
			if load64(a, i) != load64(b, i) {
				return false
			}
		}
		return load64(a, n-8) == load64(b, n-8) // the last 8 bytes, overlapping
	case n >= 4:
		return load32(a, 0) == load32(b, 0) && load32(a, n-4) == load32(b, n-4)
	case n > 0:
		return a[0] == b[0] && a[n/2] == b[n/2] && a[n-1] == b[n-1]
	}
	return true
}

// load64 is the 8 bytes of s at i as a little-endian integer.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// load32 is the 4 bytes of s at i as a little-endian integer.
func load32(s string, i int) uint32 {
	s = s[i : i+4]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}
