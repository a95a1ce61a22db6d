package state

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// A node registration records the accessor of the token that authorized
// it, and the store refuses it, with the state unchanged, when that
// token was deleted or had expired before the entry committed: the
// check at the hello came before the revocation, the write after it.
func TestNodeRegistrationRefusedOnceItsTokenIsRevoked(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	reg := func(by string) *structs.NodeUpsertRequest {
		return &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n-new", Status: structs.NodeReady, Agent: true,
			LastSeen: now, RegisteredBy: by}}
	}
	f := newFixture(t)
	addACL(f)
	f.must(structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Actor: "boot", Tokens: []*structs.ACLToken{
		{AccessorID: "short", SecretHash: "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc", Type: structs.ACLClientToken,
			Policies: []string{"ops"}, ExpirationTime: now}}})
	f.must(structs.ACLTokenDeleteType, &structs.ACLTokenDeleteRequest{Actor: "boot", AccessorIDs: []string{"t1"}})
	for _, tc := range []struct{ name, by string }{
		{"deleted", "t1"},
		{"never existed", "nobody"},
		{"expired at the registration's time", "short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.digest()
			_, err := f.apply(structs.NodeUpsertType, reg(tc.by))
			if !errors.Is(err, structs.ErrPermissionDenied) {
				t.Fatalf("registration by %s: %v, want permission denied", tc.by, err)
			}
			if f.digest() != before || f.node("n-new") != nil {
				t.Fatal("a refused registration changed the state")
			}
		})
	}
	// A live token, and no token (ACLs off), register.
	f.must(structs.NodeUpsertType, reg("boot"))
	if n := f.node("n-new"); n == nil || n.RegisteredBy != "boot" {
		t.Fatalf("node = %+v, want registered by boot", n)
	}
	f.must(structs.NodeUpsertType, reg(""))
}

// A registration that sets or replaces an operator's decision is judged
// at commit by the registering token's policies as they stand then: a
// node token's takeover of a node an operator registered in direct mode
// after the API's or the hello's check, or a token whose operator:write
// was narrowed in between, is refused with the state unchanged.
func TestRegistrationHoldsOperatorFieldsAtCommit(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := newFixture(t)
	addACL(f)
	f.must(structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Actor: "boot", Policies: []*structs.ACLPolicy{
		{Name: "node-x", Rules: `node_id "x" { policy = "write" }`},
		{Name: "opw", Rules: `operator { policy = "write" }`}}})
	f.must(structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Actor: "boot", Tokens: []*structs.ACLToken{
		{AccessorID: "nodetok", SecretHash: strings.Repeat("c", 64), Type: structs.ACLClientToken, Policies: []string{"node-x"}},
		{AccessorID: "optok", SecretHash: strings.Repeat("d", 64), Type: structs.ACLClientToken, Policies: []string{"opw"}}}})
	direct := &structs.Node{ID: "x", Status: structs.NodeReady, RootDir: "/var/lib/volhost/x", LastSeen: now}
	agent := &structs.Node{ID: "x", Status: structs.NodeReady, RootDir: "/var/lib/volhost/x", Agent: true, LastSeen: now}
	plain := &structs.Node{ID: "x", Status: structs.NodeReady, LastSeen: now}
	withRoot := direct
	tests := []struct {
		name string
		old  *structs.Node // registered first by the operator (no token)
		way  structs.RegistrationWay
		node *structs.Node
		by   string
		want string // "" accepted, else a substring of the refusal
	}{
		{"node token sets root_dir", nil, structs.ThroughAPI, withRoot, "nodetok", "setting root_dir is an operator's decision"},
		{"operator:read token sets root_dir", nil, structs.ThroughAPI, withRoot, "t1", "setting root_dir is an operator's decision"},
		{"operator:write token sets root_dir", nil, structs.ThroughAPI, withRoot, "optok", ""},
		{"management token sets root_dir", nil, structs.ThroughAPI, withRoot, "boot", ""},
		{"node token registers a plain node", nil, structs.ThroughAPI, plain, "nodetok", ""},
		{"node token replaces the operator's direct node", direct, structs.ThroughAPI, plain, "nodetok", "the node holds an operator's root_dir"},
		{"node token replaces an agent's node", agent, structs.ThroughAPI, plain, "nodetok", "registered by its node agent"},
		{"agent takes over the operator's direct node", direct, structs.ByItsAgent, agent, "nodetok", "its agent cannot take it over"},
		{"agent registers again", agent, structs.ByItsAgent, agent, "nodetok", ""},
		{"agent registers a new node", nil, structs.ByItsAgent, agent, "nodetok", ""},
		{"an older leader's registration carries no mark", direct, "", plain, "nodetok", ""},
	}
	forget := func() {
		if f.node("x") != nil {
			f.must(structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: "x", Force: true})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forget()
			if tt.old != nil {
				f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: tt.old})
			}
			n := tt.node.Copy()
			n.RegisteredBy = tt.by
			before := f.digest()
			_, err := f.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n, HoldOperatorFields: tt.way})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, structs.ErrPermissionDenied) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.by) {
				t.Fatalf("got %v, want permission denied containing %q and the accessor", err, tt.want)
			}
			if f.digest() != before {
				t.Fatal("a refused registration changed the state")
			}
		})
	}

	// The operator's token narrowed to operator:read before the
	// registration commits: judged by the policy at commit.
	forget()
	f.must(structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Actor: "boot", Policies: []*structs.ACLPolicy{
		{Name: "opw", Rules: `operator { policy = "read" }`}}})
	n := withRoot.Copy()
	n.RegisteredBy = "optok"
	if _, err := f.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n, HoldOperatorFields: structs.ThroughAPI}); !errors.Is(err, structs.ErrPermissionDenied) {
		t.Fatalf("registration by a token narrowed before the commit: %v, want permission denied", err)
	}
	if _, err := f.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n, HoldOperatorFields: "x"}); errKind(err) != "invalid:hold_operator_fields" {
		t.Fatalf("an unknown registration way: %v, want invalid", err)
	}
}
