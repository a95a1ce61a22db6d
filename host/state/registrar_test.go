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
		{Name: "opw", Rules: `operator { policy = "write" }`},
		{Name: structs.AnonymousPolicy, Rules: `node_id "x" { policy = "write" }`}}})
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
		by   string // the token's accessor; structs.AnonymousAccessor: none, under the anonymous policy
		want string // "" accepted, else a substring of the refusal
	}{
		{"anonymous sets root_dir", nil, structs.ThroughAPI, withRoot, structs.AnonymousAccessor, "setting root_dir is an operator's decision"},
		{"anonymous replaces the operator's direct node", direct, structs.ThroughAPI, plain, structs.AnonymousAccessor, "the node holds an operator's root_dir"},
		{"anonymous registers a plain node", nil, structs.ThroughAPI, plain, structs.AnonymousAccessor, ""},
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
			req := &structs.NodeUpsertRequest{Node: n, HoldOperatorFields: tt.way}
			if n.RegisteredBy = tt.by; tt.by == structs.AnonymousAccessor {
				n.RegisteredBy, req.Anonymous = "", true
			}
			before := f.digest()
			_, err := f.apply(structs.NodeUpsertType, req)
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

// An agent's hello keeps the node's status as stored when it commits: the
// status it carries was read when it arrived, and an operator's "down"
// (or a lost heartbeat) committed since is not undone by it. An older
// leader's entry (no way) writes what it carries, as before.
func TestAgentRegistrationKeepsTheStoredStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := newFixture(t)
	hello := &structs.Node{ID: "x", Status: structs.NodeReady, Agent: true, RootDir: "/var/lib/volhost/x", LastSeen: now}
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: hello, HoldOperatorFields: structs.ByItsAgent})
	f.must(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "x", Status: structs.NodeDown})
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: hello, HoldOperatorFields: structs.ByItsAgent})
	if n := f.node("x"); n.Status != structs.NodeDown || n.HeartbeatLost {
		t.Fatalf("after a hello that read ready: %+v, want the operator's down kept", n)
	}
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: hello})
	if n := f.node("x"); n.Status != structs.NodeReady {
		t.Fatalf("an older leader's hello: %+v, want the status it carries", n)
	}
}

// A liveness transition is refused when the heartbeat_lost it assumed has
// changed with the status unchanged: an operator's "down" over a node
// whose heartbeat was lost is the operator's word, and a heartbeat's
// "ready" (or the tracker's "gone") decided before it is stale.
func TestLivenessChecksTheHeartbeatLostItAssumed(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := newFixture(t)
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "x", Status: structs.NodeReady, Agent: true, LastSeen: now}})
	lost, kept := true, false
	f.must(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "x", From: structs.NodeReady, FromHeartbeatLost: &kept,
		Status: structs.NodeDown, Time: now})
	f.must(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "x", Status: structs.NodeDown})
	for _, to := range []structs.NodeStatus{structs.NodeReady, structs.NodeGone} {
		before := f.digest()
		_, err := f.apply(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "x", From: structs.NodeDown, FromHeartbeatLost: &lost,
			Status: to, Time: now})
		if errKind(err) != "conflict" || !strings.Contains(err.Error(), "heartbeat_lost false, not true") {
			t.Fatalf("a stale transition to %s over the operator's down: %v, want a conflict", to, err)
		}
		if f.digest() != before {
			t.Fatal("a refused transition changed the state")
		}
	}
	// Decided from the operator's down as it stands: liveness moves only
	// what it set.
	before := f.digest()
	_, err := f.apply(structs.NodeLivenessType, &structs.NodeLivenessRequest{NodeID: "x", From: structs.NodeDown, FromHeartbeatLost: &kept,
		Status: structs.NodeReady, Time: now})
	if errKind(err) != "conflict" || !strings.Contains(err.Error(), "by an operator's word") {
		t.Fatalf("liveness over the operator's down: %v, want a conflict", err)
	}
	if f.digest() != before {
		t.Fatal("a refused transition changed the state")
	}
	if n := f.node("x"); n.Status != structs.NodeDown || n.HeartbeatLost {
		t.Fatalf("x = %+v, want the operator's down", n)
	}
}
