package cluster

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// aclView is a server's ACL state: its bootstrap index and its tokens'
// accessors, sorted.
func aclView(t *testing.T, s *state.Store) (uint64, []string) {
	t.Helper()
	snap := s.Snapshot()
	idx, err := snap.ACLBootstrapIndex()
	if err != nil {
		t.Fatal(err)
	}
	toks, err := snap.ACLTokens(nil)
	if err != nil {
		t.Fatal(err)
	}
	var acc []string
	for _, tok := range toks {
		acc = append(acc, tok.AccessorID)
	}
	slices.Sort(acc)
	return idx, acc
}

// bootstrapOps bootstraps the ACLs through leader l and writes policy
// "ops" (operator:write); it answers the service and the management token.
func bootstrapOps(t *testing.T, l *node) (*acl.Service, *structs.ACLToken) {
	t.Helper()
	svc := acl.NewService(l.s, l.c, nil)
	boot, _, err := svc.Bootstrap(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.UpsertPolicy(testCtx(t), boot.AccessorID, &structs.ACLPolicy{Name: "ops", Rules: `operator { policy = "write" }`}); err != nil {
		t.Fatal(err)
	}
	return svc, boot
}

// TestRestoreKeepsTheACLBootstrap: restoring an operator snapshot saved
// before `acl bootstrap` used to wipe the bootstrap mark with the tokens,
// so the first caller of POST /v1/acl/bootstrap, anyone reaching the
// port, got a management token. Such a snapshot has no ACL state of its
// own: the restore brings its data back and keeps the cluster's
// policies, tokens and bootstrap mark, on every server (raft installs
// the state the leader built), and a second bootstrap is refused on
// whichever server leads next. A snapshot saved after the bootstrap
// brings its own ACL state, whole, as a backup does.
func TestRestoreKeepsTheACLBootstrap(t *testing.T) {
	tc := newCluster(t, 3)
	l := tc.leader()
	loadBase(t, l.c)
	var pre bytes.Buffer
	if err := l.c.SaveSnapshot(testCtx(t), &pre); err != nil {
		t.Fatal(err)
	}
	svc, boot := bootstrapOps(t, l)
	ops, _, err := svc.CreateToken(testCtx(t), boot.AccessorID, acl.NewToken{Name: "ops", Policies: []string{"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	var post bytes.Buffer
	if err := l.c.SaveSnapshot(testCtx(t), &post); err != nil {
		t.Fatal(err)
	}
	late, _, err := svc.CreateToken(testCtx(t), boot.AccessorID, acl.NewToken{Name: "late", Policies: []string{"ops"}})
	if err != nil {
		t.Fatal(err)
	}
	// Data written after the save, which the restore takes back.
	mustApply(t, l.c, structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n2", Status: structs.NodeDown})
	bootIdx, tokens := aclView(t, l.s)
	if bootIdx == 0 || len(tokens) != 3 {
		t.Fatalf("before the restore: bootstrap index %d, tokens %v", bootIdx, tokens)
	}

	if err := l.c.RestoreSnapshot(testCtx(t), bytes.NewReader(pre.Bytes()), RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitConverged()
	for _, n := range tc.nodes {
		idx, got := aclView(t, n.s)
		if idx != bootIdx || !slices.Equal(got, tokens) {
			t.Fatalf("%s after restoring a snapshot saved before the bootstrap: bootstrap index %d tokens %v, want %d %v",
				n.id, idx, got, bootIdx, tokens)
		}
		if nd, _ := n.s.Snapshot().NodeByID(nil, "n2"); nd == nil || nd.Status == structs.NodeDown {
			t.Fatalf("%s: the data was not restored: %+v", n.id, nd)
		}
		if p, _ := n.s.Snapshot().ACLPolicyByName(nil, "ops"); p == nil {
			t.Fatalf("%s: the cluster's policy was dropped", n.id)
		}
	}
	// Bootstrap refused on the leader, and on a follower once it leads.
	anon := acl.NewService(l.s, l.c, nil)
	if _, _, err := anon.Bootstrap(testCtx(t)); !errors.Is(err, state.ErrACLBootstrapped) {
		t.Fatalf("bootstrap after the restore: %v, want ErrACLBootstrapped", err)
	}
	next := tc.followers(l)[0]
	if err := l.c.TransferLeadership(testCtx(t), next.id); err != nil {
		t.Fatal(err)
	}
	nl := tc.leader()
	if _, _, err := acl.NewService(nl.s, nl.c, nil).Bootstrap(testCtx(t)); !errors.Is(err, state.ErrACLBootstrapped) {
		t.Fatalf("bootstrap on the next leader (%s): %v, want ErrACLBootstrapped", nl.id, err)
	}

	// A snapshot of this cluster saved after the bootstrap does not roll
	// the ACL state back either: the token made after it stays (and a
	// token deleted since would stay deleted: the snapshot package's
	// TestRestoreNeverRevivesARevokedToken).
	if err := nl.c.RestoreSnapshot(testCtx(t), bytes.NewReader(post.Bytes()), RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitConverged()
	want := []string{boot.AccessorID, ops.AccessorID, late.AccessorID}
	slices.Sort(want)
	for _, n := range tc.nodes {
		idx, got := aclView(t, n.s)
		if idx != bootIdx || !slices.Equal(got, want) {
			t.Fatalf("%s after restoring a snapshot saved after the bootstrap: bootstrap index %d tokens %v, want %d %v",
				n.id, idx, got, bootIdx, want)
		}
	}
}
