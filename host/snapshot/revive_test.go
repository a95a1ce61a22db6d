package snapshot

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// TestRestoreNeverRevivesARevokedToken: a backup of this cluster holds
// token t1 (a node agent's, say); t1 leaks and is deleted, and policy ops
// is narrowed. Weeks later an operator restores that backup to get a
// deregistered volume back. The restore brought the backup's ACL state
// whole: t1 worked again and ops granted what it no longer did, and
// nothing said so: a restore of data widened access. Within one cluster
// the ACL state never goes back through a restore: the cluster keeps its
// own, whatever the snapshot holds. A snapshot of another cluster (one
// rebuilt from a backup, -force-foreign) still brings its own.
func TestRestoreNeverRevivesARevokedToken(t *testing.T) {
	kr := newKeyring(t)
	cluster := testStore(t) // bootstrapped, policy ops, tokens boot and t1
	backup := save(t, cluster, kr, "c1")
	idx := cluster.LatestIndex()
	for _, w := range []struct {
		mt  structs.MessageType
		req any
	}{
		{structs.ACLTokenDeleteType, &structs.ACLTokenDeleteRequest{Actor: "boot", AccessorIDs: []string{"t1"}}},
		{structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Actor: "boot",
			Policies: []*structs.ACLPolicy{{Name: "ops", Rules: `events { policy = "read" }`}}}},
		{structs.ACLTokenUpsertType, &structs.ACLTokenUpsertRequest{Actor: "boot",
			Tokens: []*structs.ACLToken{{AccessorID: "t2", SecretHash: strings.Repeat("d", 64), Type: structs.ACLClientToken, Policies: []string{"ops"}}}}},
	} {
		idx++
		if _, err := cluster.Apply(idx, w.mt, w.req); err != nil {
			t.Fatal(err)
		}
	}
	h, got, err := Read(bytes.NewReader(backup), kr, Options{ClusterID: "c1", KeepACLOf: aclOf(cluster)})
	if err != nil {
		t.Fatal(err)
	}
	if ids := tokenIDs(t, got); !slices.Equal(ids, []string{"boot", "t2"}) || !h.KeptACL {
		t.Fatalf("tokens after restoring this cluster's backup: %v (kept %v), want the cluster's own [boot t2]", ids, h.KeptACL)
	}
	if p, _ := got.Snapshot().ACLPolicyByName(nil, "ops"); p == nil || !strings.Contains(p.Rules, "events") {
		t.Fatalf("policy ops after the restore: %+v, want the cluster's narrowed one", p)
	}
	if v, _ := got.Snapshot().VolumeByID(nil, "default", "v1"); v == nil {
		t.Fatal("the backup's data was not restored")
	}

	// Another cluster's snapshot (a cluster rebuilt from it) brings its
	// own ACL state, the tokens its agents hold.
	h, got, err = Read(bytes.NewReader(backup), kr, Options{ClusterID: "c2", ForceForeign: true, KeepACLOf: aclOf(cluster)})
	if err != nil {
		t.Fatal(err)
	}
	if ids := tokenIDs(t, got); h.KeptACL || !slices.Equal(ids, []string{"boot", "t1"}) {
		t.Fatalf("kept %v, tokens %v from another cluster's snapshot: want its own", h.KeptACL, ids)
	}
}
