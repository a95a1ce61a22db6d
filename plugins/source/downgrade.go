package source

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/volhost/volhost/plugins"
)

// ErrDowngrade marks a bundle whose manifest version is older than the
// version the module serves.
var ErrDowngrade = errors.New("bundle older than the serving version")

// notOlder refuses a bundle older than serving. A signature names its
// digest forever: whoever may push to the registry, without the key,
// could re-point the tag at a bundle signed long ago (one with a known
// bug) and the agent would go back to it. Versions compare when both are
// dotted numbers, maybe with a semver pre-release and build metadata
// (1.2.0, v2.0, 2.0.0-rc.1 below 2.0.0); any other pair has no order and
// passes.
// To go back on purpose, sign the old module again under a higher
// version, or use `volhost module rollback`.
func notOlder(b Bundle, module, serving string) error {
	if serving == "" {
		return nil
	}
	man, err := plugins.ParseManifest(module+".hcl", b.Manifest)
	if err != nil {
		return nil // not a manifest: the runtime refuses it, naming why
	}
	if cmp, ok := compareVersions(man.Version, serving); ok && cmp < 0 {
		return fmt.Errorf("%w: the bundle is version %s, the module serves %s (a signature stays valid, so this may be an old signed bundle put back on the tag); "+
			"to go back, sign it again under a higher version, or use volhost module rollback", ErrDowngrade, man.Version, serving)
	}
	return nil
}

// compareVersions orders two versions: dotted numbers ("1.2.0", "v2.0"),
// each maybe with a semver 2.0.0 pre-release ("-rc.1", lower than the
// release) and build metadata ("+build.7", ignored): -1, 0 or 1, and ok
// false when either is no such version. A pre-release once had no order
// with anything, so an old signed release candidate put back on the tag
// passed the downgrade check (TestReplayedPrereleaseBundleIsRefused).
func compareVersions(a, b string) (int, bool) {
	pa, prea, oka := parseVersion(a)
	pb, preb, okb := parseVersion(b)
	if !oka || !okb {
		return 0, false
	}
	for i := range max(len(pa), len(pb)) {
		var x, y uint64
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
	}
	return comparePrerelease(prea, preb), true
}

// parseVersion splits v into its dotted numbers and its pre-release
// identifiers (nil for a release), dropping build metadata.
func parseVersion(v string) (nums []uint64, pre []string, ok bool) {
	v, _, _ = strings.Cut(strings.TrimPrefix(v, "v"), "+")
	core, p, hasPre := strings.Cut(v, "-")
	if nums, ok = dotted(core); !ok {
		return nil, nil, false
	}
	if hasPre {
		if p == "" {
			return nil, nil, false
		}
		pre = strings.Split(p, ".")
		for _, id := range pre {
			if id == "" {
				return nil, nil, false
			}
		}
	}
	return nums, pre, true
}

// comparePrerelease orders pre-releases as semver 2.0.0 (item 11): a
// release (nil) is above any pre-release; identifiers compare in turn,
// numeric ones numerically and below alphanumeric ones, which compare in
// ASCII order; a longer list wins a tie.
func comparePrerelease(a, b []string) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	for i := range min(len(a), len(b)) {
		x, errx := strconv.ParseUint(a[i], 10, 64)
		y, erry := strconv.ParseUint(b[i], 10, 64)
		switch {
		case errx == nil && erry == nil:
			if x != y {
				if x < y {
					return -1
				}
				return 1
			}
		case errx == nil:
			return -1
		case erry == nil:
			return 1
		default:
			if c := strings.Compare(a[i], b[i]); c != 0 {
				return c
			}
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

func dotted(v string) ([]uint64, bool) {
	if v == "" {
		return nil, false
	}
	var out []uint64
	for _, f := range strings.Split(v, ".") {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}
