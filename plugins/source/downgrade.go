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
// dotted numbers (1.2.0, v2.0); any other pair has no order and passes.
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

// compareVersions orders two dotted-number versions ("1.2.0", "v2.0"):
// -1, 0 or 1, and ok false when either is not one.
func compareVersions(a, b string) (int, bool) {
	pa, oka := dotted(a)
	pb, okb := dotted(b)
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
	return 0, true
}

func dotted(v string) ([]uint64, bool) {
	v = strings.TrimPrefix(v, "v")
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
