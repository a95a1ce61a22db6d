package defaultpolicy

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEqual(t *testing.T) {
	tests := []struct{ a, b string }{
		{"", ""}, {"a", ""}, {"a", "a"}, {"a", "b"}, {"ab", "ab"}, {"ab", "ba"}, {"abc", "abd"}, {"abc", "xbc"}, {"abc", "axc"},
		{"abcd", "abcd"}, {"abcd", "abce"}, {"alloc-3", "alloc-3"}, {"alloc-3", "alloc-4"}, {"alloc-3", "blloc-3"}, {"alloc-3", "allxc-3"},
		{"complete", "complete"}, {"complete", "completf"}, {"complete", "xomplete"},
		{"5f1c2b7e-8a41-4c55-9d1e-0c7a3e2f9b10", "5f1c2b7e-8a41-4c55-9d1e-0c7a3e2f9b10"},
		{"5f1c2b7e-8a41-4c55-9d1e-0c7a3e2f9b10", "5f1c2b7e-8a41-4c55-9d1f-0c7a3e2f9b10"},
		{"5f1c2b7e-8a41-4c55-9d1e-0c7a3e2f9b10", "5f1c2b7e-8a41-4c55-9d1e-0c7a3e2f9b1"},
	}
	for _, tc := range tests {
		if got, want := equal(tc.a, tc.b), tc.a == tc.b; got != want {
			t.Errorf("equal(%q, %q) = %v, want %v", tc.a, tc.b, got, want)
		}
	}
	// Every length up to 40 with a difference at every position.
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 40; n++ {
		var sb strings.Builder
		for range n {
			sb.WriteByte(byte('a' + r.IntN(26)))
		}
		a := sb.String()
		if !equal(a, strings.Clone(a)) {
			t.Fatalf("equal(%q, itself) = false", a)
		}
		for i := 0; i < n; i++ {
			b := []byte(a)
			b[i] ^= 1
			if equal(a, string(b)) {
				t.Fatalf("equal(%q, %q) = true", a, b)
			}
		}
	}
}

// TestKindOf: the table lookup classifies exactly the known statuses,
// byte for byte: every one-byte change, cut and extension of each is
// another status.
func TestKindOf(t *testing.T) {
	want := map[string]allocKind{AllocPending: kindPending, AllocRunning: kindRunning, AllocComplete: kindComplete,
		AllocFailed: kindFailed, AllocLost: kindLost, AllocGone: kindGone}
	check := func(s string) {
		t.Helper()
		w := want[s] // kindOther for any other string
		if got := kindOf(s); got != w {
			t.Errorf("kindOf(%q) = %d, want %d", s, got, w)
		}
	}
	for _, s := range []string{"", "p", "pen", "unknown", "evicting", "gon", "GONE"} {
		check(s)
	}
	for s := range want {
		check(s)
		check(s[:len(s)-1])
		check(s + "x")
		check("x" + s)
		for i := range len(s) {
			b := []byte(s)
			b[i] ^= 0x20
			check(string(b))
		}
	}
}
