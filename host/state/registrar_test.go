package state

import (
	"errors"
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
