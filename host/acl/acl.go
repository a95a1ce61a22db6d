package acl

import (
	"slices"
	"strings"
)

// ACL is the compiled, merged view of a token's policies: the answer to
// "may this request do that". It is immutable and safe to share.
type ACL struct {
	management bool
	exact      map[string]nsCap
	globs      []glob[nsCap] // most literal characters first
	node       level
	nodeExact  map[string]level
	nodeGlobs  []glob[level] // most literal characters first
	operator   level
	modules    level
	events     level
}

// glob is a pattern with '*' and what it grants; literal counts its other
// characters, so the most specific glob is tried first.
type glob[T any] struct {
	pattern string
	grant   T
	literal int
}

// sortedGlobs lists the globs of m, most literal characters first (ties by
// pattern, so the order is stable).
func sortedGlobs[T any](m map[string]T) []glob[T] {
	out := make([]glob[T], 0, len(m))
	for pat, g := range m {
		out = append(out, glob[T]{pattern: pat, grant: g, literal: len(pat) - strings.Count(pat, "*")})
	}
	slices.SortFunc(out, func(x, y glob[T]) int {
		if x.literal != y.literal {
			return y.literal - x.literal
		}
		return strings.Compare(x.pattern, y.pattern)
	})
	return out
}

// ManagementACL allows everything.
func ManagementACL() *ACL { return &ACL{management: true} }

// DenyAll allows nothing (no policy at all).
func DenyAll() *ACL { return &ACL{} }

// New merges policies into one ACL: capabilities are unioned, deny wins.
func New(policies ...*Policy) *ACL {
	a := &ACL{exact: map[string]nsCap{}, nodeExact: map[string]level{}}
	globs := map[string]nsCap{}
	nodeGlobs := map[string]level{}
	for _, p := range policies {
		if p == nil {
			continue
		}
		for pat, caps := range p.Namespaces {
			if strings.Contains(pat, "*") {
				globs[pat] = merge(globs[pat], caps)
			} else {
				a.exact[pat] = merge(a.exact[pat], caps)
			}
		}
		a.node = mergeLevel(a.node, p.Node)
		for pat, l := range p.NodeIDs {
			if strings.Contains(pat, "*") {
				nodeGlobs[pat] = mergeLevel(nodeGlobs[pat], l)
			} else {
				a.nodeExact[pat] = mergeLevel(a.nodeExact[pat], l)
			}
		}
		a.operator = mergeLevel(a.operator, p.Operator)
		a.modules = mergeLevel(a.modules, p.Modules)
		a.events = mergeLevel(a.events, p.Events)
	}
	a.globs = sortedGlobs(globs)
	a.nodeGlobs = sortedGlobs(nodeGlobs)
	return a
}

// AllowedNode reports whether a grants the node capability c (NodeRead or
// NodeWrite) for the one node nodeID: the node block's grant, or the
// node_id rule governing nodeID (exact, else the most literal glob),
// whichever is higher, except that a deny in either wins. A node agent's
// token scoped with node_id "n1" thus writes n1 and nothing else.
func (a *ACL) AllowedNode(c Capability, nodeID string) bool {
	if a.management {
		return true
	}
	need := levelRead
	switch c {
	case NodeRead:
	case NodeWrite:
		need = levelWrite
	default:
		return false
	}
	rule := a.nodeRule(nodeID)
	if rule == levelDeny || a.node == levelDeny {
		return false
	}
	return max(rule, a.node) >= need
}

// nodeRule is the node_id rule governing nodeID: the exact rule, else
// the most literal glob matching it, else levelNone. AllowedNode and ServesNode both judge by it, so a token's
// node writes and its node agent cannot come to disagree on which rule
// names a node.
func (a *ACL) nodeRule(nodeID string) level { return governing(a.nodeExact, a.nodeGlobs, nodeID) }

// ServesNode reports whether a may act as nodeID's node agent: connect
// on the node RPC as nodeID, keep it ready with heartbeats, and receive
// its claims' node steps, with their volumes' secrets. Only a node_id
// rule governing nodeID (exact, else the most literal glob) that grants
// write does, or a management token; a deny in that rule or in the node
// block wins. The node block alone does not: it is what the API's node
// routes need (PUT /v1/allocs, PUT /v1/plugins, a scheduler
// integration's token scoped to its namespaces), and it made its holder
// every node's agent, receiving the secrets of every namespace's volumes
// claimed there.
func (a *ACL) ServesNode(nodeID string) bool {
	if a.management {
		return true
	}
	rule := a.nodeRule(nodeID)
	return rule == levelWrite && a.node != levelDeny
}

// IsManagement reports whether a is a management ACL.
func (a *ACL) IsManagement() bool { return a.management }

// Allowed reports whether a grants c; ns is the namespace of a namespaced
// capability (ignored otherwise).
func (a *ACL) Allowed(c Capability, ns string) bool {
	if a.management {
		return true
	}
	if b, ok := nsCapOf[c]; ok {
		caps := a.namespaceCaps(ns)
		return caps&capDeny == 0 && caps&b != 0
	}
	switch c {
	case NodeRead:
		return allows(a.node, levelRead)
	case NodeWrite:
		return allows(a.node, levelWrite)
	case OperatorRead:
		return allows(a.operator, levelRead)
	case OperatorWrite:
		return allows(a.operator, levelWrite)
	case ModulesRead:
		return allows(a.modules, levelRead)
	case ModulesReload:
		return allows(a.modules, levelWrite)
	case EventsRead:
		return allows(a.events, levelRead)
	}
	return false // Management and unknown capabilities
}

// AllowedEverywhere reports whether a grants the namespaced capability c in
// every namespace: a cross-namespace list needs it, since it would show
// volumes of namespaces the token cannot name. Only a "*" rule (or a
// management token) does, and only when no namespace rule denies c.
func (a *ACL) AllowedEverywhere(c Capability) bool {
	if a.management {
		return true
	}
	b, ok := nsCapOf[c]
	if !ok {
		return false
	}
	var star nsCap
	for _, g := range a.globs {
		if g.pattern == "*" {
			star = g.grant
		} else if g.grant&b == 0 || g.grant&capDeny != 0 {
			return false
		}
	}
	for _, caps := range a.exact {
		if caps&b == 0 || caps&capDeny != 0 {
			return false
		}
	}
	return star&capDeny == 0 && star&b != 0
}

func allows(have, need level) bool { return have != levelDeny && have >= need }

// namespaceCaps finds the rule that governs ns: an exact one, else the
// matching glob with the most literal characters.
func (a *ACL) namespaceCaps(ns string) nsCap { return governing(a.exact, a.globs, ns) }

// governing is the rule that governs name, for namespace rules and
// node_id rules alike: the exact rule, else the first glob matching it
// (globs are sorted most literal first, sortedGlobs), else the zero
// grant (no rule: nothing granted, nothing denied).
func governing[T any](exact map[string]T, globs []glob[T], name string) T {
	if rule, ok := exact[name]; ok {
		return rule
	}
	for _, g := range globs {
		if globMatch(g.pattern, name) {
			return g.grant
		}
	}
	var none T
	return none
}

// globMatch matches s against a pattern where '*' matches any run of
// characters (including none) and everything else matches itself.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last)
}
