//go:build wasip1

// Command decode is a Go guest whose release handler decodes the request
// as HandleReleaseInto does (in place, into one reused value) and answers
// with no decisions: BenchmarkGuestSplit's decode share of a Go guest call.
package main

import (
	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/guest"
)

func main() {}

var req abi.PolicyRequest

func init() {
	guest.HandleReleaseRaw(func(in, out []byte) ([]byte, error) { return out, req.UnmarshalBorrowing(in) })
}
