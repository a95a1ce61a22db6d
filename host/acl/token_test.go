package acl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
)

// memState is a State over maps, with a policy index that moves on write.
type memState struct {
	mu       sync.Mutex
	tokens   map[string]*structs.ACLToken // by hash
	policies map[string]*structs.ACLPolicy
	index    uint64
}

func (m *memState) ACLTokenBySecretHash(h string) (*structs.ACLToken, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tokens[h], nil
}
func (m *memState) ACLPolicyByName(n string) (*structs.ACLPolicy, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.policies[n], nil
}
func (m *memState) ACLPoliciesIndex() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.index, nil
}
func (m *memState) setPolicy(name, rules string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.index++
	m.policies[name] = &structs.ACLPolicy{Name: name, Rules: rules}
}

const secret1 = "0b9e6a8c-3c52-4d5e-9f3b-6f1a2b3c4d5e"

func newMem() *memState {
	return &memState{tokens: map[string]*structs.ACLToken{}, policies: map[string]*structs.ACLPolicy{}}
}

func TestResolveExpiryAndCache(t *testing.T) {
	st := newMem()
	st.setPolicy("p", `node { policy = "read" }`)
	clk := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st.tokens[HashSecret(secret1)] = &structs.ACLToken{AccessorID: "a1", SecretHash: HashSecret(secret1),
		Type: structs.ACLClientToken, Policies: []string{"p"}, ExpirationTime: clk.Now().Add(time.Hour)}
	r := NewResolver(st, clk)

	id, err := r.Resolve(secret1)
	if err != nil || !id.ACL.Allowed(NodeRead, "") || id.ACL.Allowed(NodeWrite, "") || id.Accessor() != "a1" {
		t.Fatalf("resolve: %+v %v", id, err)
	}
	// A policy change is seen at once: the cache follows the policy index.
	st.setPolicy("p", `node { policy = "write" }`)
	if id, _ := r.Resolve(secret1); !id.ACL.Allowed(NodeWrite, "") {
		t.Fatal("a changed policy was not seen")
	}
	clk.Advance(time.Hour)
	if _, err := r.Resolve(secret1); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("at expiry: %v, want ErrTokenExpired", err)
	}
	if _, err := r.Resolve("nonsense"); !errors.Is(err, ErrTokenMalformed) {
		t.Fatalf("malformed: %v", err)
	}
	if _, err := r.Resolve("1b9e6a8c-3c52-4d5e-9f3b-6f1a2b3c4d5e"); !errors.Is(err, ErrTokenNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	// Anonymous: nothing until an anonymous policy exists.
	if id, err := r.Resolve(""); err != nil || id.ACL.Allowed(NamespaceRead, "default") || id.Accessor() != "anonymous" {
		t.Fatalf("anonymous without policy: %+v %v", id, err)
	}
	st.setPolicy(structs.AnonymousPolicy, `namespace "default" { policy = "read" }`)
	if id, _ := r.Resolve(""); !id.ACL.Allowed(NamespaceRead, "default") {
		t.Fatal("anonymous policy not applied")
	}
}

// The resolver is safe for concurrent use while policies change.
func TestResolveConcurrent(t *testing.T) {
	st := newMem()
	st.setPolicy("p", `node { policy = "read" }`)
	st.tokens[HashSecret(secret1)] = &structs.ACLToken{AccessorID: "a1", SecretHash: HashSecret(secret1),
		Type: structs.ACLClientToken, Policies: []string{"p", structs.AnonymousPolicy}}
	r := NewResolver(st, nil)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				id, err := r.Resolve(secret1)
				if err != nil || !id.ACL.Allowed(NodeRead, "") {
					t.Errorf("resolve: %v", err)
					return
				}
			}
		}()
	}
	for j := 0; j < 50; j++ {
		st.setPolicy(structs.AnonymousPolicy, `events { policy = "read" }`)
	}
	wg.Wait()
}

// fakeLog applies nothing and records the requests.
type fakeLog struct{ reqs []any }

func (f *fakeLog) Apply(_ context.Context, _ structs.MessageType, req any) (uint64, any, error) {
	f.reqs = append(f.reqs, req)
	return uint64(len(f.reqs)), nil, nil
}

type memReader struct{ *memState }

func (memReader) ACLPolicies() ([]*structs.ACLPolicy, error)           { return nil, nil }
func (memReader) ACLTokens() ([]*structs.ACLToken, error)              { return nil, nil }
func (memReader) ACLTokenByAccessor(string) (*structs.ACLToken, error) { return nil, nil }

// The service sends only hashes to the log, and refuses rules that do not
// parse before anything is written.
func TestServiceWritesHashesOnly(t *testing.T) {
	log := &fakeLog{}
	s := NewService(memReader{newMem()}, log, clockwork.NewFakeClock())
	tok, secret, err := s.CreateToken(context.Background(), "boss", NewToken{Name: "n", Policies: []string{"p"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	req := log.reqs[0].(*structs.ACLTokenUpsertRequest)
	if got := req.Tokens[0]; got.SecretHash != HashSecret(secret) || got.SecretHash == secret || req.Actor != "boss" || tok.ExpirationTime.IsZero() {
		t.Fatalf("logged %+v", got)
	}
	if _, err := s.UpsertPolicy(context.Background(), "boss", &structs.ACLPolicy{Name: "x", Rules: `node { policy = "root" }`}); err == nil || len(log.reqs) != 1 {
		t.Fatalf("bad rules: %v, %d writes", err, len(log.reqs))
	}
}

// prefixState answers a token lookup by the hash's first 4 characters,
// as a loose or prefix-matching index would.
type prefixState struct{ *memState }

func (p prefixState) ACLTokenBySecretHash(h string) (*structs.ACLToken, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, t := range p.tokens {
		if k[:4] == h[:4] {
			return t, nil
		}
	}
	return nil, nil
}

// A secret resolves only to the token whose stored hash equals its own,
// compared in full (and in constant time) by the resolver itself,
// whatever the state's lookup returned: a lookup that matches loosely
// does not let a near secret in.
func TestResolveComparesTheWholeHash(t *testing.T) {
	m := newMem()
	m.setPolicy("p", `operator { policy = "read" }`)
	tok := &structs.ACLToken{AccessorID: "a1", SecretHash: HashSecret(secret1), Policies: []string{"p"}}
	m.tokens[tok.SecretHash] = tok
	r := NewResolver(prefixState{m}, nil)
	if _, err := r.Resolve(secret1); err != nil {
		t.Fatalf("the token's own secret: %v", err)
	}
	// Another well-formed secret whose hash shares the stored one's
	// first 4 hex digits (about 65,000 tries).
	near := ""
	for i := 0; near == ""; i++ {
		s := fmt.Sprintf("0b9e6a8c-3c52-4d5e-9f3b-%012x", i)
		if s != secret1 && HashSecret(s)[:4] == tok.SecretHash[:4] {
			near = s
		}
	}
	if _, err := r.Resolve(near); !errors.Is(err, ErrTokenNotFound) {
		t.Fatalf("a secret whose hash shares the stored one's prefix: %v, want not found", err)
	}
}
