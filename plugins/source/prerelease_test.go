package source

import (
	"errors"
	"testing"
)

// TestReplayedPrereleaseBundleIsRefused: after 2.0.0 serves, whoever may
// push to the registry, without the key, puts back on the tag a bundle
// signed long ago as 1.0.0-rc.1 (a release candidate with a known bug).
// Its version was not a plain dotted number, so it had "no order" with
// 2.0.0 and the poller applied it: the downgrade check, there to refuse
// exactly such a replay, let the oldest bundles through. Semantic
// versions with a pre-release (and build metadata) order as semver 2.0.0
// says; only versions that are no semver at all pass unordered.
func TestReplayedPrereleaseBundleIsRefused(t *testing.T) {
	bundle := func(v string) Bundle {
		return Bundle{Manifest: []byte("kind = \"release-policy\"\nversion = \"" + v + "\"\n")}
	}
	for _, tc := range []struct {
		bundle, serving string
		refused         bool
	}{
		{"1.0.0", "2.0.0", true},
		{"1.0.0-rc.1", "2.0.0", true},
		{"2.0.0-rc.1", "2.0.0", true},
		{"2.0.0-rc.1", "2.0.0-rc.2", true},
		{"2.0.0-alpha", "2.0.0-alpha.1", true},
		{"2.0.0-rc.2", "2.0.0-rc.10", true},
		{"1.9.9+build.7", "2.0.0", true},
		{"2.0.0", "2.0.0-rc.1", false},
		{"2.1.0-rc.1", "2.0.0", false},
		{"2.0.0+build.8", "2.0.0+build.7", false},
		{"nightly", "2.0.0", false},
	} {
		err := notOlder(bundle(tc.bundle), "grace", tc.serving)
		if refused := errors.Is(err, ErrDowngrade); refused != tc.refused {
			t.Errorf("bundle %s over %s: %v, want refused %v", tc.bundle, tc.serving, err, tc.refused)
		}
	}
}
