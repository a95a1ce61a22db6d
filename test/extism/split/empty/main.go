//go:build wasip1

// Command empty is a Go guest whose release handler answers at once with
// no decisions (ReleaseRaw): what BenchmarkGuestSplit measures as the fixed
// cost of a Go guest call (the two exports, the SDK, the yield rule).
package main

import "github.com/volhost/volhost/abi/guest"

func main() {}

func init() {
	guest.HandleReleaseRaw(func(in, out []byte) ([]byte, error) { return out, nil })
}
