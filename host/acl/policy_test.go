package acl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

func mustParse(t *testing.T, rules string) *Policy {
	t.Helper()
	p, err := ParsePolicy(rules)
	if err != nil {
		t.Fatalf("parse %q: %v", rules, err)
	}
	return p
}

func TestCapabilities(t *testing.T) {
	a := New(mustParse(t, `
namespace "default" {
  capabilities = ["read", "claim"]
}
namespace "team-*" {
  policy = "write"
}
namespace "team-secret" {
  policy = "deny"
}
namespace "*" {
  policy = "read"
}
node {
  policy = "write"
}
operator {
  policy = "read"
}
modules {
  policy = "read"
}
`))
	for _, c := range []struct {
		c    Capability
		ns   string
		want bool
	}{
		{NamespaceRead, "default", true},
		{NamespaceClaim, "default", true},
		{NamespaceDetach, "default", false},
		{NamespaceRegister, "team-a", true},
		{NamespaceDeregister, "team-a", true},
		{NamespaceForceDeregister, "team-a", false}, // only ever granted by name
		{NamespaceRead, "team-secret", false},       // exact deny beats the glob
		{NamespaceRead, "other", true},              // "*"
		{NamespaceClaim, "other", false},
		{NodeRead, "", true},
		{NodeWrite, "", true},
		{OperatorRead, "", true},
		{OperatorWrite, "", false},
		{ModulesRead, "", true},
		{ModulesReload, "", false},
		{EventsRead, "", false},
		{Management, "", false},
	} {
		if got := a.Allowed(c.c, c.ns); got != c.want {
			t.Errorf("Allowed(%s, %q) = %v, want %v", c.c, c.ns, got, c.want)
		}
	}
	if a.AllowedEverywhere(NamespaceRead) {
		t.Error("read everywhere despite the deny on team-secret")
	}
	if !New(mustParse(t, `namespace "*" { policy = "read" }`)).AllowedEverywhere(NamespaceRead) {
		t.Error(`namespace "*" read is not read everywhere`)
	}
	if !ManagementACL().Allowed(Management, "") || DenyAll().Allowed(NamespaceRead, "default") {
		t.Error("management/deny-all")
	}
}

// Policies merge by union; a deny in one wins over a grant in another.
func TestMerge(t *testing.T) {
	a := New(mustParse(t, `
namespace "default" {
  capabilities = ["read"]
}
node {
  policy = "read"
}`), mustParse(t, `
namespace "default" {
  capabilities = ["claim"]
}
node {
  policy = "write"
}
events {
  policy = "deny"
}`), mustParse(t, `events { policy = "read" }`))
	if !a.Allowed(NamespaceRead, "default") || !a.Allowed(NamespaceClaim, "default") || !a.Allowed(NodeWrite, "") {
		t.Error("union lost a grant")
	}
	if a.Allowed(EventsRead, "") {
		t.Error("deny did not win")
	}
	b := New(mustParse(t, `namespace "x" { policy = "deny" }`), mustParse(t, `namespace "x" { policy = "write" }`))
	if b.Allowed(NamespaceRead, "x") {
		t.Error("namespace deny did not win")
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ rules, want string }{
		{``, "empty"},
		{`namespace "default" { capabilities = ["rede"] }`, `unknown capability "rede"`},
		{`namespace "default" { policy = "admin" }`, `unknown policy "admin"`},
		{`namespace "default" {}`, "set policy"},
		{`node { policy = "reload" }`, `node: unknown policy "reload"`},
		{`modules { policy = "write" }`, `modules: unknown policy "write"`},
		{`events { policy = "write" }`, `events: unknown policy "write"`},
		{`agent { policy = "write" }`, `Unsupported block type`},
		{`node { policy = "read" }` + "\n" + `node { policy = "write" }`, "at most one node block"},
		{`namespace "a b" { policy = "read" }`, "whitespace"},
		{`namespace { policy = "read" }`, "label"},
		{`node_id "n1" { policy = "reload" }`, `node_id "n1": unknown policy "reload"`},
		{`node_id "a b" { policy = "write" }`, "whitespace"},
		{`node_id { policy = "write" }`, "label"},
		{strings.Repeat("#", MaxPolicyBytes+1), "at most"},
	} {
		_, err := ParsePolicy(c.rules)
		var ve *structs.ValidationError
		if err == nil || !errors.As(err, &ve) || ve.Field != "rules" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePolicy(%.40q): %v, want a rules error naming %q", c.rules, err, c.want)
		}
	}
}

// TestNodeScopedAccess: node_id rules scope node access to named nodes (a
// node agent's token writes its own node only); the node block
// covers every node and the routes that are about no one node.
func TestNodeScopedAccess(t *testing.T) {
	agent := New(mustParse(t, `node_id "n1" { policy = "write" }`))
	web := New(mustParse(t, `
node { policy = "read" }
node_id "web-*" { policy = "write" }
node_id "web-db" { policy = "deny" }
`))
	denyAll := New(mustParse(t, `
node { policy = "deny" }
node_id "n1" { policy = "write" }
`))
	for _, c := range []struct {
		name string
		a    *ACL
		c    Capability
		node string
		want bool
	}{
		{"agent writes its node", agent, NodeWrite, "n1", true},
		{"agent reads its node", agent, NodeRead, "n1", true},
		{"agent writes no other node", agent, NodeWrite, "n2", false},
		{"agent reads no other node", agent, NodeRead, "n2", false},
		{"glob writes", web, NodeWrite, "web-1", true},
		{"exact deny beats the glob", web, NodeRead, "web-db", false},
		{"node block reads others", web, NodeRead, "batch-1", true},
		{"node block does not write others", web, NodeWrite, "batch-1", false},
		{"node block deny wins", denyAll, NodeWrite, "n1", false},
		{"not a node capability", agent, OperatorWrite, "n1", false},
		{"management", ManagementACL(), NodeWrite, "any", true},
	} {
		if got := c.a.AllowedNode(c.c, c.node); got != c.want {
			t.Errorf("%s: AllowedNode(%s, %q) = %v, want %v", c.name, c.c, c.node, got, c.want)
		}
	}
	// A route about no one node (plugins, allocations) needs the node block.
	if agent.Allowed(NodeWrite, "") || agent.Allowed(NodeRead, "") {
		t.Error("a node_id-scoped token passes a route that is about every node")
	}
}

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"a*", "ba", false},
		{"*c", "abc", true}, {"a*c", "ac", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "acb", false},
		{"ab*ba", "aba", false}, {"abc", "abc", true}, {"abc", "abd", false},
	} {
		if got := globMatch(c.p, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

// FuzzParsePolicy: any input parses or fails with a rules error, never
// panics, and what parses compiles to an ACL that answers every check.
func FuzzParsePolicy(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "policies", "*.hcl"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`namespace "*" { policy = "read" }`)
	f.Fuzz(func(t *testing.T, rules string) {
		p, err := ParsePolicy(rules)
		if err != nil {
			var ve *structs.ValidationError
			if !errors.As(err, &ve) || ve.Field != "rules" {
				t.Fatalf("error is not a rules validation error: %v", err)
			}
			return
		}
		a := New(p)
		for _, c := range []Capability{NamespaceRead, NamespaceForceDeregister, NodeWrite, OperatorWrite, ModulesReload, EventsRead, Management} {
			a.Allowed(c, "default")
			a.AllowedEverywhere(c)
		}
		if a.Allowed(Management, "") {
			t.Fatal("a policy granted management")
		}
	})
}

// BenchmarkAllowed is the capability check alone on a compiled ACL.
func BenchmarkAllowed(b *testing.B) {
	p, err := ParsePolicy("namespace \"default\" {\n capabilities = [\"read\", \"claim\"]\n}\nnamespace \"team-*\" {\n policy = \"write\"\n}\nnode {\n policy = \"write\"\n}")
	if err != nil {
		b.Fatal(err)
	}
	a := New(p)
	b.ReportAllocs()
	for b.Loop() {
		if !a.Allowed(NamespaceClaim, "default") || !a.Allowed(NamespaceDeregister, "team-x") || a.Allowed(OperatorRead, "") {
			b.Fatal("wrong answer")
		}
	}
}
