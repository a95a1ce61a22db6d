package acl

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
)

// WatchRevocation reports a token's expiry when the resolver's clock
// reaches it (not before), and a refusal by allowed at once.
func TestWatchRevocation(t *testing.T) {
	st := newMem()
	st.setPolicy("p", `node { policy = "write" }`)
	clk := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st.tokens[HashSecret(secret1)] = &structs.ACLToken{AccessorID: "a1", SecretHash: HashSecret(secret1),
		Type: structs.ACLClientToken, Policies: []string{"p"}, ExpirationTime: clk.Now().Add(time.Hour)}
	r := NewResolver(st, clk)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	allowNode := func(id *Identity) error {
		if !id.ACL.Allowed(NodeWrite, "") {
			return errors.New("no node:write")
		}
		return nil
	}

	revoked := r.WatchRevocation(ctx, secret1, allowNode)
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the expiry timer is armed
		t.Fatal(err)
	}
	select {
	case err := <-revoked:
		t.Fatalf("revoked before expiry: %v", err)
	default:
	}
	clk.Advance(time.Hour)
	if err := <-revoked; !errors.Is(err, ErrRevoked) || !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("at expiry: %v, want ErrRevoked wrapping ErrTokenExpired", err)
	}

	refused := errors.New("refused")
	if err := <-r.WatchRevocation(ctx, "", func(*Identity) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused identity: %v, want the refusal", err)
	}
}
