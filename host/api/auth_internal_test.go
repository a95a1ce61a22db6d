package api

import (
	"strings"
	"testing"
)

// TestEveryRouteDeclaresACapability: every route a fully enabled server
// registers has a rule, and no rule names a route that does not exist
// (a typo would leave the real route denied, and the rule dead).
func TestEveryRouteDeclaresACapability(t *testing.T) {
	checkCoversRoutes(t, "routeRules", routeRules)
	for p, r := range routeRules {
		// The UI's static assets are open; every datum they show comes
		// from an authorized API call.
		if r.open && !strings.HasSuffix(p, "{$}") && p != "GET /v1/status/leader" && !strings.Contains(p, "/v1/acl/bootstrap") && p != "GET /ui/" {
			t.Errorf("route %q is open; only the health check, bootstrap, the UI's assets and the empty-ID 400s may be", p)
		}
	}
}

// TestEveryRouteDeclaresItsParameters: every route a fully enabled server
// registers declares the query parameters it takes, and the table names
// no route that does not exist, so no route ignores a parameter silently.
func TestEveryRouteDeclaresItsParameters(t *testing.T) {
	checkCoversRoutes(t, "routeParams", routeParams)
}

// checkCoversRoutes fails unless table, keyed by route pattern, has an
// entry for every route a fully enabled server registers and none for a
// route it does not.
func checkCoversRoutes[T any](t *testing.T, name string, table map[string]T) {
	t.Helper()
	s := New(Config{}, nil, nil, nil)
	s.EnableCluster(nil)
	s.EnableModules(nil)
	s.EnableSchedulers(nil)
	s.EnableACL(ACLConfig{})
	seen := map[string]bool{}
	for _, p := range s.Patterns() {
		seen[p] = true
		if _, ok := table[p]; !ok {
			t.Errorf("route %q has no entry in %s", p, name)
		}
	}
	for p := range table {
		if !seen[p] {
			t.Errorf("%s names %q, which no route registers", name, p)
		}
	}
}
