package cluster

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// While a server of the previous release (which registers a node token's
// takeover of an operator's node) could apply the entry, the leader
// writes a registration without the mark that has the store judge the
// token's operator:write at commit, and still refuses the takeover before
// the log; once every server advertises the feature the mark is written
// and a takeover committed behind the leader's check is refused by every
// replica. The liveness mark (the heartbeat_lost a transition assumed)
// is gated alike.
func TestNodeHoldOperatorFieldsGated(t *testing.T) {
	tc, old := clusterWithOld(t, func(c *Config) { c.lacking = []Feature{FeatureNodeOperator, FeatureLivenessLost} })
	l := tc.leader()
	svc, boot := bootstrapOps(t, l)
	if _, err := svc.UpsertPolicy(testCtx(t), boot.AccessorID, &structs.ACLPolicy{Name: "node-n1", Rules: `node_id "n1" { policy = "write" }`}); err != nil {
		t.Fatal(err)
	}
	nodeTok, _, err := svc.CreateToken(testCtx(t), boot.AccessorID, acl.NewToken{Name: "n1", Policies: []string{"node-n1"}})
	if err != nil {
		t.Fatal(err)
	}
	// The operator registers n1 in direct mode, with a root_dir.
	mustApply(t, l.c, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady, RootDir: "/var/lib/volhost/n1"}})
	byNodeToken := func(id string) *structs.NodeUpsertRequest {
		return &structs.NodeUpsertRequest{HoldOperatorFields: structs.ThroughAPI,
			Node: &structs.Node{ID: id, Status: structs.NodeReady, RegisteredBy: nodeTok.AccessorID}}
	}
	refused := func() {
		t.Helper()
		before := l.c.LastIndex()
		_, _, err := l.c.Apply(testCtx(t), structs.NodeUpsertType, byNodeToken("n1"))
		if !errors.Is(err, structs.ErrPermissionDenied) {
			t.Fatalf("the node token's registration over the operator's n1: %v, want permission denied", err)
		}
		if l.c.LastIndex() != before {
			t.Fatal("the refused takeover reached the log")
		}
	}
	marks := func(first uint64) bool {
		marked := false
		for _, e := range entriesSince(t, l.c, first) {
			marked = marked || bytes.Contains(e, []byte(`"hold_operator_fields"`)) || bytes.Contains(e, []byte(`"from_heartbeat_lost"`))
		}
		return marked
	}
	lost, kept := true, false
	liveness := func(from *bool) *structs.NodeLivenessRequest {
		return &structs.NodeLivenessRequest{NodeID: "n1", From: structs.NodeReady, FromHeartbeatLost: from, Status: structs.NodeDown,
			Time: time.Now(), Term: l.c.ReadyTerm()}
	}

	refused()
	before := l.c.LastIndex()
	if _, _, err := l.c.Apply(testCtx(t), structs.NodeLivenessType, liveness(&lost)); !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("a transition assuming a lost heartbeat n1 never had, while gated: %v, want a conflict", err)
	}
	if l.c.LastIndex() != before {
		t.Fatal("the refused transition reached the log")
	}
	first := l.c.LastIndex()
	mustApply(t, l.c, structs.NodeUpsertType, byNodeToken("n2"))
	mustApply(t, l.c, structs.NodeLivenessType, liveness(&kept))
	if marks(first) {
		t.Fatal("an entry carries a mark while s3 does not know it")
	}

	upgradeOld(t, tc, old)
	l = tc.leader()
	if !l.c.FeatureEnabled(FeatureNodeOperator) || !l.c.FeatureEnabled(FeatureLivenessLost) {
		t.Fatal("features not enabled once every server advertises them")
	}
	refused()
	first = l.c.LastIndex()
	mustApply(t, l.c, structs.NodeUpsertType, byNodeToken("n3"))
	if !marks(first) {
		t.Fatal("the mark is not written once every server knows it")
	}
	tc.waitConverged()
	first = l.c.LastIndex()
	mustApply(t, l.c, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady, RootDir: "/var/lib/volhost/n1"}})
	mustApply(t, l.c, structs.NodeLivenessType, liveness(&kept))
	if !marks(first) {
		t.Fatal("the liveness mark is not written once every server knows it")
	}
	tc.waitConverged()
	for _, n := range tc.nodes {
		if got, _ := n.s.Snapshot().NodeByID(nil, "n1"); got == nil || got.RootDir != "/var/lib/volhost/n1" || got.RegisteredBy != "" {
			t.Fatalf("%s: n1 = %+v, want the operator's registration", n.id, got)
		}
	}
}
