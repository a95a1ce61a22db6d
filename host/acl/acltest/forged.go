// Package acltest holds what the tests of the packages above host/acl
// share about tokens: here, the token entry a rogue raft peer forges.
package acltest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// ForgedManagementToken is the raft log entry a rogue peer
// (internal/testutil.AppendAsPeer)
// sends to make itself a management token whose secret it chose, encoded
// as the leader encodes commands: the message type byte, then the time
// and the request. A server that applied it would grant that secret
// everything; the role and certificate tests check that none does.
func ForgedManagementToken(t testing.TB, secret string) []byte {
	t.Helper()
	req, err := json.Marshal(&structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
		AccessorID: "6d2c2c1e-0000-4000-8000-00000000a77a", SecretHash: acl.HashSecret(secret),
		Name: "rogue", Type: structs.ACLManagementToken,
	}}, Actor: "rogue"})
	if err != nil {
		t.Fatal(err)
	}
	at, _ := time.Now().UTC().MarshalText()
	return append([]byte{byte(structs.ACLTokenUpsertType)}, `{"time":"`+string(at)+`","req":`+string(req)+`}`...)
}
