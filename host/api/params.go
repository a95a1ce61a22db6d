package api

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"
)

// Query parameters (RATIONALE "Query parameters"). Nomad and Kubernetes
// ignore a parameter they do not know; here a route refuses one with a
// 400 naming it and the parameters the route takes, because a misspelt
// or unsupported filter that is ignored answers everything as if it had
// matched (GET /v1/events?since=abc returned every event), and a
// misspelt ?namespace= on a write acts on "default". A parameter given
// twice is refused too: only the first would count.

// Parameter groups: every GET takes stale (forward.go), every blocking
// read index and wait, every list per_page and next_token.
var (
	pBlocking = []string{"index", "wait"}
	pList     = []string{"index", "wait", "per_page", "next_token"}
)

// anyParams marks a route whose parameters are not the API's to judge.
var anyParams = []string{"*"}

// params joins parameter groups and single names.
func params(groups ...[]string) []string { return slices.Concat(groups...) }

// one is a group of single names.
func one(names ...string) []string { return names }

// routeParams declares the query parameters of every route, by the exact
// pattern it is registered with (as routeRules its capability);
// TestEveryRouteDeclaresItsParameters keeps the two in step with the
// routes. A route missing here (one an embedder adds with Server.Handle)
// is not checked.
var routeParams = map[string][]string{
	"GET /v1/volumes":              params(pList, one("namespace", "plugin_id", "claim_state", "stuck", "search")),
	"PUT /v1/volumes":              nil,
	"POST /v1/volumes":             nil,
	"GET /v1/volumes/leftovers":    pList,
	"DELETE /v1/volumes/leftovers": one("id", "all"),
	"GET /v1/volume/{id}":          params(pBlocking, one("namespace")),
	"DELETE /v1/volume/{id}":       one("namespace", "force"),
	"PUT /v1/volume/{id}/claim":    one("namespace"),
	"POST /v1/volume/{id}/claim":   one("namespace"),
	"PUT /v1/volume/{id}/detach":   one("namespace", "node"),
	"POST /v1/volume/{id}/detach":  one("namespace", "node"),

	"GET /v1/nodes":              pList,
	"PUT /v1/nodes":              nil,
	"POST /v1/nodes":             nil,
	"GET /v1/node/{id}":          pBlocking,
	"DELETE /v1/node/{id}":       one("force"),
	"PUT /v1/node/{id}/status":   nil,
	"POST /v1/node/{id}/status":  nil,
	"PUT /v1/node/{id}/fence":    nil,
	"DELETE /v1/node/{id}/fence": nil,
	"GET /v1/plugins":            pList,
	"PUT /v1/plugins":            nil,
	"POST /v1/plugins":           nil,
	"GET /v1/plugin/{id}":        pBlocking,
	"DELETE /v1/plugin/{id}":     nil,
	"GET /v1/allocs":             params(pList, one("node_id", "namespace")),
	"PUT /v1/allocs":             nil,
	"POST /v1/allocs":            nil,
	"GET /v1/alloc/{id}":         params(pBlocking, one("namespace")),
	"GET /v1/events":             params(pList, one("volume_id", "namespace", "type", "after", "before")),
	"PUT /v1/system/gc":          nil,
	"POST /v1/system/gc":         nil,
	"GET /v1/status/leader":      nil,
	// Prometheus' exposition handler; a scrape config may add params.
	"GET /v1/metrics": anyParams,
	// The empty-ID routes answer their own 400 naming the ID.
	"/v1/volume/{$}": anyParams,
	"/v1/node/{$}":   anyParams,
	"/v1/plugin/{$}": anyParams,
	"/v1/alloc/{$}":  anyParams,

	"GET /v1/status/peers":                   nil,
	"GET /v1/modules":                        nil,
	"GET /v1/scheduler/status":               nil,
	"GET /v1/module/{id}":                    one("per_page", "next_token"), // next_token: refused with its own reason
	"PUT /v1/modules/reload":                 nil,
	"POST /v1/modules/reload":                nil,
	"GET /v1/volume/{id}/module-view":        one("namespace", "step", "alloc"),
	"DELETE /v1/module/{id}/shadow":          nil,
	"PUT /v1/module/{id}/promote":            one("allow_selection_change"),
	"POST /v1/module/{id}/promote":           one("allow_selection_change"),
	"PUT /v1/module/{id}/rollback":           nil,
	"POST /v1/module/{id}/rollback":          nil,
	"PUT /v1/module/{id}/shadow":             nil,
	"POST /v1/module/{id}/shadow":            nil,
	"GET /v1/operator/snapshot":              nil,
	"PUT /v1/operator/snapshot":              one("force_foreign"),
	"POST /v1/operator/snapshot":             one("force_foreign"),
	"GET /v1/operator/keyring":               nil,
	"PUT /v1/operator/keyring/rotate":        nil,
	"POST /v1/operator/keyring/rotate":       nil,
	"POST " + joinPath:                       nil,
	"PUT " + joinPath:                        nil,
	"GET /v1/operator/raft/configuration":    nil,
	"GET /v1/operator/raft/digest":           one("index"),
	"DELETE /v1/operator/raft/peer":          one("id"),
	"PUT /v1/operator/raft/transfer-leader":  one("id"),
	"POST /v1/operator/raft/transfer-leader": one("id"),

	// The web UI's pages carry their own state in the query (?page=, ?q=).
	"GET /ui/":                            anyParams,
	"GET /v1/acl/token/self/capabilities": one("namespace"),
	"GET /v1/stats":                       params(pBlocking, one("namespace")),

	"POST /v1/acl/bootstrap":       nil,
	"PUT /v1/acl/bootstrap":        nil,
	"GET /v1/acl/policies":         nil,
	"GET /v1/acl/policy/{name}":    nil,
	"PUT /v1/acl/policy/{name}":    nil,
	"POST /v1/acl/policy/{name}":   nil,
	"DELETE /v1/acl/policy/{name}": nil,
	"GET /v1/acl/tokens":           nil,
	"PUT /v1/acl/token":            nil,
	"POST /v1/acl/token":           nil,
	"GET /v1/acl/token/self":       nil,
	"GET /v1/acl/token/{id}":       nil,
	"DELETE /v1/acl/token/{id}":    nil,
}

// repeatable are the parameters a route reads every value of.
var repeatable = map[string]string{"DELETE /v1/volumes/leftovers": "id"}

// checkingParams wraps the handler of pattern with its parameter check.
func checkingParams(pattern string, h http.Handler) http.Handler {
	accepted, ok := routeParams[pattern]
	if !ok || slices.Equal(accepted, anyParams) {
		return h
	}
	get := strings.HasPrefix(pattern, "GET ")
	if get {
		accepted = params(accepted, one("stale"))
	}
	accepted = slices.Clone(accepted)
	slices.Sort(accepted)
	accepted = slices.Compact(accepted)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkParams(r, pattern, accepted); err != nil {
			WriteError(w, err)
			return
		}
		// stale is read only where a follower could answer (forward.go);
		// a single server checks it too, so ?stale=perhaps fails alike.
		if get {
			if _, err := queryBool(r, "stale"); err != nil {
				WriteError(w, err)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// checkParams refuses the first unknown or repeated parameter of r, in
// name order so the answer is the same for the same query.
func checkParams(r *http.Request, pattern string, accepted []string) error {
	q := r.URL.Query()
	names := slices.Sorted(maps.Keys(q))
	route := strings.TrimPrefix(pattern, "/")
	for _, name := range names {
		if name == "" {
			return badRequest("", "a query parameter without a name in %q", r.URL.RawQuery)
		}
		if !utf8.ValidString(name) {
			// Quoted: as the field, JSON would mangle it into U+FFFDs.
			return badRequest("", "query parameter name %q is not valid UTF-8", name)
		}
		if _, known := slices.BinarySearch(accepted, name); !known {
			takes := "no query parameters"
			if len(accepted) > 0 {
				takes = "only " + strings.Join(accepted, ", ")
			}
			return badRequest(name, "unknown query parameter; %s takes %s", route, takes)
		}
		if n := len(q[name]); n > 1 && repeatable[pattern] != name {
			return badRequest(name, "given %d times; give it once", n)
		}
	}
	return nil
}
