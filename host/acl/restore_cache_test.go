package acl_test

import (
	"bytes"
	"testing"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// TestRestoreDropsCompiledACLs: compiled ACLs are cached per policy set
// until the policies table's index moves. A restore (another cluster's
// snapshot, -force-foreign) replaces the policies; when the restored
// table's index was the one the cache was built at (clusters set up by
// the same script write their policies at the same indexes), every token
// kept the old rules until the next policy write: "ops" granted
// operator:write after the restore made it events:read. The cache now
// also ends when the state is replaced.
func TestRestoreDropsCompiledACLs(t *testing.T) {
	const secret = "00000000-0000-4000-8000-000000000001"
	mk := func(rules string) *state.Store {
		st := state.NewStore()
		must := func(i uint64, mt structs.MessageType, req any) {
			if _, err := st.Apply(i, mt, req); err != nil {
				t.Fatal(err)
			}
		}
		must(1, structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: &structs.ACLToken{AccessorID: "boot", SecretHash: acl.HashSecret("00000000-0000-4000-8000-000000000000"), Type: structs.ACLManagementToken}})
		must(2, structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Actor: "boot", Policies: []*structs.ACLPolicy{{Name: "ops", Rules: rules}}})
		must(3, structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Actor: "boot", Tokens: []*structs.ACLToken{{AccessorID: "t", SecretHash: acl.HashSecret(secret), Type: structs.ACLClientToken, Policies: []string{"ops"}}}})
		return st
	}
	cur := mk(`operator { policy = "write" }`)
	other := mk(`events { policy = "read" }`)
	r := acl.NewResolver(cur, nil)
	id, err := r.Resolve(secret)
	if err != nil || !id.ACL.Allowed(acl.OperatorWrite, "") {
		t.Fatalf("before the restore: %v", err)
	}
	var buf bytes.Buffer
	if err := other.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	if err := cur.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	id, err = r.Resolve(secret)
	if err != nil {
		t.Fatal(err)
	}
	if id.ACL.Allowed(acl.OperatorWrite, "") {
		t.Fatal("stale compiled ACL after restore: operator:write still granted")
	}
}
