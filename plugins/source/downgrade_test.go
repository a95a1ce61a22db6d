package source

import "testing"

// TestCompareVersions: dotted numbers compare field by field (a missing
// field is 0, a leading v is dropped); anything else has no order.
func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		cmp  int
		ok   bool
	}{
		{"1.0.0", "2.0.0", -1, true},
		{"2.0.0", "1.9.9", 1, true},
		{"1.10.0", "1.9.0", 1, true},
		{"v1.2", "1.2.0", 0, true},
		{"1.0.0-rc1", "1.0.0", -1, true},
		{"1.0.0-", "1.0.0", 0, false},
		{"", "1.0.0", 0, false},
		{"nightly", "1.0.0", 0, false},
	} {
		cmp, ok := compareVersions(tc.a, tc.b)
		if cmp != tc.cmp || ok != tc.ok {
			t.Errorf("compareVersions(%q, %q) = %d, %v; want %d, %v", tc.a, tc.b, cmp, ok, tc.cmp, tc.ok)
		}
	}
}
