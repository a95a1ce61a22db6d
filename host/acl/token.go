package acl

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/structs"
)

// Why a token did not resolve. Callers branch with errors.Is; the API
// answers each with 403 "Permission denied".
var (
	ErrTokenMalformed = errors.New("malformed token (want a secret ID such as 8b1c...-...)")
	ErrTokenNotFound  = errors.New("token not found (unknown or revoked)")
	ErrTokenExpired   = errors.New("token expired")
)

// HashSecret is how a secret is stored: SHA-256, lower-case hex. A stolen
// snapshot or state dump holds no usable secret.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// newSecret returns a random secret and accessor (UUID v4 from crypto/rand).
func newIDs() (accessor, secret string, err error) {
	a, err := uuid.NewRandom()
	if err != nil {
		return "", "", fmt.Errorf("generate accessor: %w", err)
	}
	s, err := uuid.NewRandom()
	if err != nil {
		return "", "", fmt.Errorf("generate secret: %w", err)
	}
	return a.String(), s.String(), nil
}

// State is what resolution reads from the replicated state. *state.Store
// implements it.
type State interface {
	ACLTokenBySecretHash(hash string) (*structs.ACLToken, error)
	ACLPolicyByName(name string) (*structs.ACLPolicy, error)
	// ACLPoliciesIndex moves on every policy write; compiled ACLs cached
	// before it are dropped.
	ACLPoliciesIndex() (uint64, error)
}

// Identity is who a request is: a token (nil for anonymous) and its ACL.
type Identity struct {
	Token *structs.ACLToken
	ACL   *ACL
}

// Accessor is the token's accessor ID, "anonymous" without a token: what
// audit events record.
func (id *Identity) Accessor() string {
	if id == nil || id.Token == nil {
		return structs.AnonymousAccessor
	}
	return id.Token.AccessorID
}

// Resolver turns a request's secret into an Identity. Compiled ACLs are
// cached per policy set until a policy changes.
type Resolver struct {
	state State
	clock clockwork.Clock

	mu         sync.Mutex
	cacheIndex cacheVersion
	cache      map[string]*ACL
}

// cacheVersion is what the compiled ACLs were built from: the policies
// table's index, and the state's generation (a restore replaces the
// policies, maybe at the same index).
type cacheVersion struct{ index, generation uint64 }

// generations is a State a restore can replace whole (*state.Store).
type generations interface{ StateGeneration() uint64 }

// NewResolver resolves against st; clk (nil: the real clock) decides expiry.
func NewResolver(st State, clk clockwork.Clock) *Resolver {
	if clk == nil {
		clk = clockwork.NewRealClock()
	}
	return &Resolver{state: st, clock: clk, cache: map[string]*ACL{}}
}

// maxCached bounds the ACL cache (distinct policy sets).
const maxCached = 1024

// Resolve returns the identity of secret: "" is anonymous (the anonymous
// policy's ACL, or nothing when there is no such policy). A malformed,
// unknown, revoked or expired secret is an error.
func (r *Resolver) Resolve(secret string) (*Identity, error) {
	if secret == "" {
		a, err := r.aclFor([]string{structs.AnonymousPolicy})
		if err != nil {
			return nil, err
		}
		return &Identity{ACL: a}, nil
	}
	if _, err := uuid.Parse(secret); err != nil || len(secret) != 36 {
		return nil, ErrTokenMalformed
	}
	hash := HashSecret(secret)
	tok, err := r.state.ACLTokenBySecretHash(hash)
	if err != nil {
		return nil, fmt.Errorf("resolve token: %w", err)
	}
	// The stored hash is compared again in constant time: the index
	// lookup compares byte by byte and stops at the first difference,
	// which is harmless only because what it compares is the SHA-256 of
	// the guess (whose prefix an attacker cannot steer toward a stored
	// one); nothing that decides a match should rest on that, nor on an
	// index that might match loosely. SECURITY.md "Token lookup timing".
	if tok == nil || subtle.ConstantTimeCompare([]byte(tok.SecretHash), []byte(hash)) != 1 {
		return nil, ErrTokenNotFound
	}
	if tok.Expired(r.clock.Now()) {
		return nil, fmt.Errorf("%w at %s", ErrTokenExpired, tok.ExpirationTime.UTC().Format(time.RFC3339))
	}
	if tok.Management() {
		return &Identity{Token: tok, ACL: ManagementACL()}, nil
	}
	a, err := r.aclFor(tok.Policies)
	if err != nil {
		return nil, err
	}
	return &Identity{Token: tok, ACL: a}, nil
}

// aclFor compiles (or finds cached) the ACL of a policy set. A policy that
// no longer exists contributes nothing.
func (r *Resolver) aclFor(names []string) (*ACL, error) {
	var v cacheVersion
	if g, ok := r.state.(generations); ok {
		v.generation = g.StateGeneration() // read first: a restore after it only drops the entry
	}
	idx, err := r.state.ACLPoliciesIndex()
	if err != nil {
		return nil, fmt.Errorf("resolve policies: %w", err)
	}
	v.index = idx
	key := strings.Join(names, "\x00")
	if len(names) > 1 {
		s := append([]string(nil), names...)
		sort.Strings(s)
		key = strings.Join(s, "\x00")
	}
	r.mu.Lock()
	if r.cacheIndex != v {
		clear(r.cache)
		r.cacheIndex = v
	}
	a, ok := r.cache[key]
	r.mu.Unlock()
	if ok {
		return a, nil
	}
	a, err = Compile(names, r.state.ACLPolicyByName)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.cacheIndex == v {
		if len(r.cache) >= maxCached {
			clear(r.cache)
		}
		r.cache[key] = a
	}
	r.mu.Unlock()
	return a, nil
}

// Compile is the ACL of a policy set, each stored policy read by policy.
// A policy that no longer exists contributes nothing. The resolver
// caches what it compiles; the state store compiles a registering
// token's at commit (host/state validateOperatorFields).
func Compile(names []string, policy func(name string) (*structs.ACLPolicy, error)) (*ACL, error) {
	var ps []*Policy
	for _, n := range names {
		sp, err := policy(n)
		if err != nil {
			return nil, fmt.Errorf("resolve policy %s: %w", n, err)
		}
		if sp == nil {
			continue
		}
		p, err := ParsePolicy(sp.Rules)
		if err != nil {
			// Stored rules were checked when applied; a parser that
			// changed since denies rather than guesses.
			continue
		}
		ps = append(ps, p)
	}
	return New(ps...), nil
}

// Log commits ACL writes through the replicated log. *cluster.Cluster
// implements it.
type Log interface {
	Apply(ctx context.Context, t structs.MessageType, req any) (uint64, any, error)
}

// Reader is what the ACL routes list. *state.Store implements it through
// its snapshot (see host/state/acl.go).
type Reader interface {
	State
	ACLPolicies() ([]*structs.ACLPolicy, error)
	ACLTokens() ([]*structs.ACLToken, error)
	ACLTokenByAccessor(accessor string) (*structs.ACLToken, error)
}

// Service is the ACL system of one server: resolution plus the writes
// (bootstrap, policies, tokens), which go through the log.
type Service struct {
	*Resolver
	read Reader
	log  Log
}

// NewService returns the ACL service over st, writing through log.
func NewService(st Reader, log Log, clk clockwork.Clock) *Service {
	return &Service{Resolver: NewResolver(st, clk), read: st, log: log}
}

// NewToken is what `acl token create` asks for.
type NewToken struct {
	Name     string
	Type     string // structs.ACLClientToken (default) or ACLManagementToken
	Policies []string
	TTL      time.Duration // 0: never expires
}

// Bootstrap creates the first management token; the cluster refuses a
// second bootstrap (an error wrapping structs.ErrConflict). The secret is
// returned once and stored nowhere.
func (s *Service) Bootstrap(ctx context.Context) (*structs.ACLToken, string, error) {
	acc, secret, err := newIDs()
	if err != nil {
		return nil, "", err
	}
	t := &structs.ACLToken{AccessorID: acc, SecretHash: HashSecret(secret), Name: "Bootstrap Token",
		Type: structs.ACLManagementToken, CreateTime: s.clock.Now().UTC()}
	if _, _, err := s.log.Apply(ctx, structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: t}); err != nil {
		return nil, "", err
	}
	got, err := s.read.ACLTokenByAccessor(acc)
	if err != nil || got == nil {
		return t, secret, err
	}
	return got, secret, nil
}

// UpsertPolicy checks the rules parse, then writes the policy.
func (s *Service) UpsertPolicy(ctx context.Context, actor string, p *structs.ACLPolicy) (uint64, error) {
	if _, err := ParsePolicy(p.Rules); err != nil {
		return 0, err
	}
	idx, _, err := s.log.Apply(ctx, structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{p}, Actor: actor})
	return idx, err
}

// DeletePolicy removes a policy by name.
func (s *Service) DeletePolicy(ctx context.Context, actor, name string) (uint64, error) {
	idx, _, err := s.log.Apply(ctx, structs.ACLPolicyDeleteType, &structs.ACLPolicyDeleteRequest{Names: []string{name}, Actor: actor})
	return idx, err
}

// CreateToken creates a token and returns it with its secret, which is
// shown once: only its hash is stored.
func (s *Service) CreateToken(ctx context.Context, actor string, nt NewToken) (*structs.ACLToken, string, error) {
	if nt.Type == "" {
		nt.Type = structs.ACLClientToken
	}
	if nt.TTL < 0 {
		return nil, "", structs.Invalid("ttl", "must not be negative, got %s", nt.TTL)
	}
	acc, secret, err := newIDs()
	if err != nil {
		return nil, "", err
	}
	now := s.clock.Now().UTC()
	t := &structs.ACLToken{AccessorID: acc, SecretHash: HashSecret(secret), Name: nt.Name, Type: nt.Type,
		Policies: nt.Policies, CreateTime: now}
	if nt.TTL > 0 {
		t.ExpirationTime = now.Add(nt.TTL)
	}
	if _, _, err := s.log.Apply(ctx, structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{t}, Actor: actor}); err != nil {
		return nil, "", err
	}
	got, err := s.read.ACLTokenByAccessor(acc)
	if err != nil || got == nil {
		return t, secret, err
	}
	return got, secret, nil
}

// DeleteToken revokes a token by accessor ID.
func (s *Service) DeleteToken(ctx context.Context, actor, accessor string) (uint64, error) {
	idx, _, err := s.log.Apply(ctx, structs.ACLTokenDeleteType, &structs.ACLTokenDeleteRequest{AccessorIDs: []string{accessor}, Actor: actor})
	return idx, err
}

// Policies lists the policies.
func (s *Service) Policies() ([]*structs.ACLPolicy, error) { return s.read.ACLPolicies() }

// Policy returns one policy (structs.ErrNotFound when missing).
func (s *Service) Policy(name string) (*structs.ACLPolicy, error) {
	p, err := s.read.ACLPolicyByName(name)
	if err == nil && p == nil {
		err = structs.NotFound("acl policy", name)
	}
	return p, err
}

// Tokens lists the tokens (hashes included: callers show views).
func (s *Service) Tokens() ([]*structs.ACLToken, error) { return s.read.ACLTokens() }

// Token returns one token by accessor (structs.ErrNotFound when missing).
func (s *Service) Token(accessor string) (*structs.ACLToken, error) {
	t, err := s.read.ACLTokenByAccessor(accessor)
	if err == nil && t == nil {
		err = structs.NotFound("acl token", accessor)
	}
	return t, err
}
