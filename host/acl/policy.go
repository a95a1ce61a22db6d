// Package acl owns volhost's access control: policies written in
// HCL, the capabilities they grant, tokens (a management type with every
// capability, a client type with the union of its policies), the
// resolution of a request's secret to an ACL, and the capability check.
// The HTTP API asks this package and nothing else whether a request may
// proceed.
//
// A policy:
//
//	namespace "default" {
//	  capabilities = ["read", "register", "claim", "detach"]
//	}
//	namespace "team-*" { policy = "read" }     # globs: '*' matches any run
//	node     { policy = "write" }              # read | write | deny
//	node_id "web-*" { policy = "write" }       # one node (or a glob) only
//	operator { policy = "read" }               # read | write | deny
//	modules  { policy = "read" }               # read | reload | deny
//	events   { policy = "read" }               # read | deny
//
// Namespace capabilities: read, register, claim, detach, deregister,
// force-deregister, or deny. A namespace policy "read" grants read, "write"
// grants read, register, claim, detach and deregister (force-deregister is
// only ever granted by name), "deny" grants nothing and overrides every
// other rule for that namespace pattern. Several policies merge by union,
// with deny winning. A request's namespace is matched exactly first, then
// against the glob with the most literal characters.
//
// node_id blocks scope node access to named nodes (a node agent's token
// should write its own node only): an API request about node N
// (registering N, reading N) is allowed by the node block or by the
// node_id rule that governs N (exact, else the glob with the most literal
// characters); a deny in that rule wins. A node agent connecting as N
// needs that node_id rule (ACL.ServesNode): the node block's write is
// the API's and makes no one a node agent. Node routes not about one node (plugins, allocations, lists) need
// the node block; an allocation write needs namespace claim in the
// allocation's namespace as well (host/api routeRules).
package acl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2/hclsimple"

	"github.com/volhost/volhost/host/structs"
)

// Capability names one permission a route needs. Namespace capabilities
// (Namespaced) are checked against a namespace.
type Capability string

// The capabilities. The names are what denials print.
const (
	NamespaceRead            Capability = "namespace:read"
	NamespaceRegister        Capability = "namespace:register"
	NamespaceClaim           Capability = "namespace:claim"
	NamespaceDetach          Capability = "namespace:detach"
	NamespaceDeregister      Capability = "namespace:deregister"
	NamespaceForceDeregister Capability = "namespace:force-deregister"
	NodeRead                 Capability = "node:read"
	NodeWrite                Capability = "node:write"
	OperatorRead             Capability = "operator:read"
	OperatorWrite            Capability = "operator:write"
	ModulesRead              Capability = "modules:read"
	ModulesReload            Capability = "modules:reload"
	EventsRead               Capability = "events:read"
	// Management is held by management tokens only (ACL administration,
	// snapshots, raft joins).
	Management Capability = "management"
)

// Namespaced reports whether c is checked against a namespace.
func (c Capability) Namespaced() bool { return strings.HasPrefix(string(c), "namespace:") }

// nsCap is a namespace capability as a bit.
type nsCap uint8

const (
	capRead nsCap = 1 << iota
	capRegister
	capClaim
	capDetach
	capDeregister
	capForceDeregister
	capDeny // set: this pattern grants nothing
)

var nsCapNames = map[string]nsCap{
	"read": capRead, "register": capRegister, "claim": capClaim, "detach": capDetach,
	"deregister": capDeregister, "force-deregister": capForceDeregister, "deny": capDeny,
}

var nsCapOf = map[Capability]nsCap{
	NamespaceRead: capRead, NamespaceRegister: capRegister, NamespaceClaim: capClaim,
	NamespaceDetach: capDetach, NamespaceDeregister: capDeregister, NamespaceForceDeregister: capForceDeregister,
}

// level is a read/write grant of a non-namespaced resource.
type level uint8

const (
	levelNone level = iota
	levelRead
	levelWrite // node/operator write, modules reload
	levelDeny
)

// Policy is a parsed policy.
type Policy struct {
	Namespaces map[string]nsCap // pattern -> capabilities
	Node       level
	NodeIDs    map[string]level // node_id pattern -> level
	Operator   level
	Modules    level
	Events     level
}

type policyFile struct {
	Namespaces []nsBlock     `hcl:"namespace,block"`
	Node       []policyBlock `hcl:"node,block"`
	NodeIDs    []nodeIDBlock `hcl:"node_id,block"`
	Operator   []policyBlock `hcl:"operator,block"`
	Modules    []policyBlock `hcl:"modules,block"`
	Events     []policyBlock `hcl:"events,block"`
}

type nsBlock struct {
	Name         string   `hcl:"name,label"`
	Policy       string   `hcl:"policy,optional"`
	Capabilities []string `hcl:"capabilities,optional"`
}

type policyBlock struct {
	Policy string `hcl:"policy"`
}

type nodeIDBlock struct {
	Name   string `hcl:"name,label"`
	Policy string `hcl:"policy"`
}

// MaxPolicyBytes bounds a policy's rules.
const MaxPolicyBytes = 64 << 10

// ParsePolicy parses a policy's HCL rules. Every error is a
// *structs.ValidationError on field "rules" naming what is wrong (an
// unknown block, attribute, capability or policy), so the API answers 400.
func ParsePolicy(rules string) (*Policy, error) {
	if len(rules) > MaxPolicyBytes {
		return nil, structs.Invalid("rules", "policy is %d bytes long, at most %d allowed", len(rules), MaxPolicyBytes)
	}
	if strings.TrimSpace(rules) == "" {
		return nil, structs.Invalid("rules", "policy is empty")
	}
	var pf policyFile
	if err := hclsimple.Decode("policy.hcl", []byte(rules), nil, &pf); err != nil {
		return nil, structs.Invalid("rules", "%s", oneLine(err.Error()))
	}
	p := &Policy{Namespaces: map[string]nsCap{}, NodeIDs: map[string]level{}}
	for _, ns := range pf.Namespaces {
		if err := validPattern(ns.Name); err != nil {
			return nil, err
		}
		caps, err := namespaceCaps(ns)
		if err != nil {
			return nil, err
		}
		p.Namespaces[ns.Name] = merge(p.Namespaces[ns.Name], caps)
	}
	var err error
	if p.Node, err = levelOf("node", pf.Node, "read", "write"); err != nil {
		return nil, err
	}
	for _, b := range pf.NodeIDs {
		if err := validNodePattern(b.Name); err != nil {
			return nil, err
		}
		l, err := levelOf(fmt.Sprintf("node_id %q", b.Name), []policyBlock{{Policy: b.Policy}}, "read", "write")
		if err != nil {
			return nil, err
		}
		if old, ok := p.NodeIDs[b.Name]; ok {
			l = mergeLevel(old, l) // deny (the largest level) wins
		}
		p.NodeIDs[b.Name] = l
	}
	if p.Operator, err = levelOf("operator", pf.Operator, "read", "write"); err != nil {
		return nil, err
	}
	if p.Modules, err = levelOf("modules", pf.Modules, "read", "reload"); err != nil {
		return nil, err
	}
	if p.Events, err = levelOf("events", pf.Events, "read", ""); err != nil {
		return nil, err
	}
	return p, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func validPattern(name string) error {
	if name == "" {
		return structs.Invalid("rules", "namespace block needs a name (a namespace or a glob such as \"*\")")
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return structs.Invalid("rules", "namespace %q: must not contain whitespace or control characters", name)
		}
	}
	return nil
}

func namespaceCaps(ns nsBlock) (nsCap, error) {
	var caps nsCap
	switch ns.Policy {
	case "":
		if len(ns.Capabilities) == 0 {
			return 0, structs.Invalid("rules", "namespace %q: set policy (read, write, deny) or capabilities", ns.Name)
		}
	case "read":
		caps = capRead
	case "write":
		caps = capRead | capRegister | capClaim | capDetach | capDeregister
	case "deny":
		caps = capDeny
	default:
		return 0, structs.Invalid("rules", "namespace %q: unknown policy %q (want read, write or deny)", ns.Name, ns.Policy)
	}
	for _, c := range ns.Capabilities {
		b, ok := nsCapNames[c]
		if !ok {
			return 0, structs.Invalid("rules", "namespace %q: unknown capability %q (want one of %s)", ns.Name, c, knownCaps())
		}
		caps |= b
	}
	return caps, nil
}

func knownCaps() string {
	names := make([]string, 0, len(nsCapNames))
	for n := range nsCapNames {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// levelOf reads a node/operator/modules/events block (at most one).
func levelOf(what string, blocks []policyBlock, read, write string) (level, error) {
	switch len(blocks) {
	case 0:
		return levelNone, nil
	case 1:
	default:
		return 0, structs.Invalid("rules", "%s: at most one %s block, got %d", what, what, len(blocks))
	}
	switch v := blocks[0].Policy; {
	case v == "deny":
		return levelDeny, nil
	case v == read:
		return levelRead, nil
	case v == write && write != "":
		return levelWrite, nil
	default:
		want := read + " or deny"
		if write != "" {
			want = read + ", " + write + " or deny"
		}
		return 0, structs.Invalid("rules", "%s: unknown policy %q (want %s)", what, v, want)
	}
}

// merge unions two capability sets; deny wins.
func merge(a, b nsCap) nsCap {
	if (a|b)&capDeny != 0 {
		return capDeny
	}
	return a | b
}

func mergeLevel(a, b level) level { return max(a, b) }

func validNodePattern(name string) error {
	if name == "" {
		return structs.Invalid("rules", "node_id block needs a name (a node ID or a glob such as \"web-*\")")
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return structs.Invalid("rules", "node_id %q: must not contain whitespace or control characters", name)
		}
	}
	return nil
}

// String renders a level for `acl policy info`.
func (l level) String() string {
	return [...]string{"none", "read", "write", "deny"}[l]
}

// Describe renders the capabilities of a namespace grant, for messages.
func (c nsCap) String() string {
	if c&capDeny != 0 {
		return "deny"
	}
	var out []string
	for name, b := range nsCapNames {
		if c&b != 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
