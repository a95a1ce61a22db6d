package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

const (
	hashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hashB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// addACL writes a bootstrap token, a policy and a client token.
func addACL(f *fixture) {
	f.must(structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: &structs.ACLToken{
		AccessorID: "boot", SecretHash: hashA, Type: structs.ACLManagementToken}})
	f.must(structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Actor: "boot",
		Policies: []*structs.ACLPolicy{{Name: "ops", Rules: `operator { policy = "read" }`}}})
	f.must(structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Actor: "boot",
		Tokens: []*structs.ACLToken{{AccessorID: "t1", SecretHash: hashB, Type: structs.ACLClientToken, Policies: []string{"ops"}}}})
}

func TestACLStateRefusals(t *testing.T) {
	f := newFixture(t)
	addACL(f)
	before := f.digest()
	for _, c := range []struct {
		name string
		t    structs.MessageType
		req  any
		want error
		msg  string
	}{
		{"second bootstrap", structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: &structs.ACLToken{
			AccessorID: "boot2", SecretHash: strings.Repeat("c", 64), Type: structs.ACLManagementToken}}, structs.ErrConflict, "already"},
		{"clear-text secret", structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
			AccessorID: "t2", SecretHash: "6f1c7b0a-0000-4000-8000-000000000000", Type: structs.ACLManagementToken}}}, nil, "SHA-256"},
		{"unknown policy", structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
			AccessorID: "t2", SecretHash: strings.Repeat("d", 64), Type: structs.ACLClientToken, Policies: []string{"nope"}}}}, structs.ErrNotFound, "nope"},
		{"duplicate secret", structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
			AccessorID: "t2", SecretHash: hashB, Type: structs.ACLManagementToken}}}, structs.ErrConflict, "in use"},
		{"duplicate accessor", structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
			AccessorID: "t1", SecretHash: strings.Repeat("e", 64), Type: structs.ACLManagementToken}}}, structs.ErrConflict, "exists"},
		{"client token without policies", structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
			AccessorID: "t3", SecretHash: strings.Repeat("f", 64), Type: structs.ACLClientToken}}}, nil, "at least one policy"},
		{"bad type", structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
			AccessorID: "t3", SecretHash: strings.Repeat("f", 64), Type: "root"}}}, nil, "type"},
		{"delete missing token", structs.ACLTokenDeleteType, &structs.ACLTokenDeleteRequest{AccessorIDs: []string{"zz"}}, structs.ErrNotFound, "zz"},
		{"delete missing policy", structs.ACLPolicyDeleteType, &structs.ACLPolicyDeleteRequest{Names: []string{"zz"}}, structs.ErrNotFound, "zz"},
		{"empty rules", structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: "x"}}}, nil, "rules"},
	} {
		_, err := f.apply(c.t, c.req)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: err %v, want %v naming %q", c.name, err, c.want, c.msg)
		}
	}
	if f.digest() != before {
		t.Error("a refused ACL write changed the state")
	}
	tok, err := f.s.ACLTokenBySecretHash(hashB)
	if err != nil || tok == nil || tok.AccessorID != "t1" {
		t.Fatalf("lookup by hash: %+v %v", tok, err)
	}
	f.must(structs.ACLTokenDeleteType, &structs.ACLTokenDeleteRequest{AccessorIDs: []string{"t1"}, Actor: "boot"})
	if tok, _ := f.s.ACLTokenBySecretHash(hashB); tok != nil {
		t.Fatal("revoked token still resolves")
	}
	var audits []string
	for _, e := range f.events() {
		if e.Type == structs.EventAudit {
			audits = append(audits, e.Fields["action"]+"/"+e.Fields["accessor"])
		}
	}
	want := "acl-bootstrap/boot acl-policy-upsert/boot acl-token-create/boot acl-token-delete/boot"
	if got := strings.Join(audits, " "); got != want {
		t.Errorf("audit events %q, want %q", got, want)
	}
}
