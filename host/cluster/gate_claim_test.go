package cluster

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// entriesSince returns the data of the command entries after index first.
func entriesSince(t *testing.T, c *Cluster, first uint64) [][]byte {
	t.Helper()
	var out [][]byte
	for i := first + 1; i <= c.LastIndex(); i++ {
		var lg raft.Log
		if err := c.logs.GetLog(i, &lg); err != nil || lg.Type != raft.LogCommand {
			continue
		}
		out = append(out, lg.Data)
	}
	return out
}

// upgradeOld has the server older than the gates advertise this binary's
// features, as its next join after the upgrade does.
func upgradeOld(t *testing.T, tc *tcluster, old *node) {
	t.Helper()
	up := old.c.Self()
	up.Build, up.Features = BuildVersion, Features()
	if _, err := tc.leader().c.Join(testCtx(t), up); err != nil {
		t.Fatal(err)
	}
	tc.waitConverged()
}

func mustRefuseGated(t *testing.T, err error, f Feature) {
	t.Helper()
	if !errors.Is(err, ErrFeatureNotEnabled) || !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), string(f)) ||
		!strings.Contains(err.Error(), "upgrade s3") {
		t.Fatalf("want the %s gate's refusal naming s3, got %v", f, err)
	}
	t.Log(err)
}

// While a server does not know the publishing state, the leader refuses a
// claim written in it and the removal of a publishing record (the claim
// path then publishes first: host/server TestClaimPublishFirstWhileGated),
// and a taken claim goes through as before; once the last server
// advertises the feature, the write-ahead record is written.
func TestClaimPublishingGated(t *testing.T) {
	tc, old := gatedCluster(t)
	l := tc.leader()
	loadBase(t, l.c)
	term := l.c.ReadyTerm()
	if l.c.ClaimsWriteAhead() {
		t.Fatal("claim path writes ahead with s3 older than the publishing state")
	}
	rec := claimReq("vol-sw", "a1", "n1")
	rec.Claim.State, rec.Term = structs.ClaimPublishing, term
	_, _, err := l.c.Apply(testCtx(t), structs.VolumeClaimType, rec)
	mustRefuseGated(t, err, FeatureClaimPublishing)
	_, _, err = l.c.Apply(testCtx(t), structs.VolumeClaimRemoveType, &structs.VolumeClaimRemoveRequest{
		Namespace: "default", VolumeID: "vol-sw", AllocID: "a1", ModifyIndex: 9, Term: term})
	mustRefuseGated(t, err, FeatureClaimPublishing)
	taken := claimReq("vol-sw", "a1", "n1")
	taken.Term = term
	mustApply(t, l.c, structs.VolumeClaimType, taken)

	upgradeOld(t, tc, old)
	if !l.c.ClaimsWriteAhead() {
		t.Fatal("claim path does not write ahead once every server knows the publishing state")
	}
	rec = claimReq("vol-mw", "a2", "n2")
	rec.Claim.State, rec.Term = structs.ClaimPublishing, term
	mustApply(t, l.c, structs.VolumeClaimType, rec)
	tc.waitConverged()
	for _, n := range tc.nodes {
		if st := claimState(n.s, "vol-mw", "a2"); st != structs.ClaimPublishing {
			t.Fatalf("%s: claim %s, want publishing", n.id, st)
		}
	}
}

// While a server does not know them, the publish record's marks
// (Unattached, Restored) and a registration's token accessor are left out
// of what the leader writes, so no server drops a field the others apply;
// the store keeps its own marks, every replica alike. An operator
// snapshot restore, which marks claims restored, is refused. Once the
// last server is upgraded they are written, and the store's commit-time
// check of the registering token applies.
func TestClaimMarksAndRegistrarGated(t *testing.T) {
	tc, old := gatedCluster(t)
	l := tc.leader()
	loadBase(t, l.c)
	term := l.c.ReadyTerm()
	cl := claimReq("vol-ro", "a2", "n2") // plugin nfs: no PUBLISH_UNPUBLISH_VOLUME
	cl.Claim.Mode, cl.Term = structs.ClaimRead, term
	mustApply(t, l.c, structs.VolumeClaimType, cl)
	mustApply(t, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a2", Namespace: "default", NodeID: "n2", JobID: "web", ClientStatus: structs.AllocComplete}}})
	first := l.c.LastIndex()

	ck := checkpointReq(l.s, "vol-ro", "a2", structs.ClaimNodeDetached, term)
	if !ck.Claim.Unattached {
		t.Fatal("the store did not record the nfs claim unattached")
	}
	ck.Claim.Restored = true
	sent := ck.Claim.Copy()
	if _, err := l.c.ClaimWriter().CheckpointClaim(testCtx(t), ck); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ck.Claim, sent) {
		t.Fatal("the older form changed the caller's claim")
	}
	n1 := readBase(t).Nodes[0]
	n1.RegisteredBy = "accessor-1"
	mustApply(t, l.c, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n1})
	if n1.RegisteredBy != "accessor-1" {
		t.Fatal("the older form changed the caller's node")
	}
	for _, e := range entriesSince(t, l.c, first) {
		for _, field := range []string{`"unattached"`, `"restored"`, `"registered_by"`} {
			if bytes.Contains(e, []byte(field)) {
				t.Fatalf("entry type %d carries %s while s3 does not know it: %s", e[0], field, e)
			}
		}
	}
	tc.waitConverged()
	for _, n := range tc.nodes {
		v, _ := n.s.Snapshot().VolumeByID(nil, "default", "vol-ro")
		c := v.Claims["a2"]
		if c == nil || c.State != structs.ClaimNodeDetached || !c.Unattached || c.Restored {
			t.Fatalf("%s: claim %+v, want node-detached, unattached kept by the store, not restored", n.id, c)
		}
		if node, _ := n.s.Snapshot().NodeByID(nil, "n1"); node.RegisteredBy != "" {
			t.Fatalf("%s: node registered by %q while gated", n.id, node.RegisteredBy)
		}
	}
	err := l.c.RestoreSnapshot(testCtx(t), strings.NewReader("not read"), RestoreOptions{})
	mustRefuseGated(t, err, FeatureClaimRestored)

	upgradeOld(t, tc, old)
	_, _, err = l.c.Apply(testCtx(t), structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n1})
	if !errors.Is(err, structs.ErrPermissionDenied) {
		t.Fatalf("registration by a token that does not exist, once the accessor is written: %v", err)
	}
}

// While a server of the previous release (which moves an allocation's
// namespace) could apply the entry, the leader writes an allocation
// without the mark that has the store refuse the move at commit, and
// still refuses a move before the log; once every server advertises the
// feature the mark is written and every replica refuses at commit.
func TestAllocKeepNamespaceGated(t *testing.T) {
	tc, old := gatedCluster(t)
	l := tc.leader()
	loadBase(t, l.c)
	alloc := func(ns string) *structs.AllocUpsertRequest {
		return &structs.AllocUpsertRequest{KeepNamespace: true, Allocs: []*structs.Alloc{
			{ID: "a9", Namespace: ns, NodeID: "n1", JobID: "web", ClientStatus: structs.AllocRunning}}}
	}
	first := l.c.LastIndex()
	mustApply(t, l.c, structs.AllocUpsertType, alloc("default"))
	for _, e := range entriesSince(t, l.c, first) {
		if bytes.Contains(e, []byte(`"keep_namespace"`)) {
			t.Fatalf("entry carries keep_namespace while s3 does not know it: %s", e)
		}
	}
	before := l.c.LastIndex()
	if _, _, err := l.c.Apply(testCtx(t), structs.AllocUpsertType, alloc("other")); !errors.As(err, new(*structs.ValidationError)) || !strings.Contains(err.Error(), "cannot move") {
		t.Fatalf("a namespace move while gated: %v, want refused before the log", err)
	}
	if l.c.LastIndex() != before {
		t.Fatal("the refused move reached the log")
	}

	upgradeOld(t, tc, old)
	l = tc.leader()
	if !l.c.FeatureEnabled(FeatureAllocNamespace) {
		t.Fatal("feature not enabled once every server advertises it")
	}
	first = l.c.LastIndex()
	mustApply(t, l.c, structs.AllocUpsertType, alloc("default"))
	marked := false
	for _, e := range entriesSince(t, l.c, first) {
		marked = marked || bytes.Contains(e, []byte(`"keep_namespace":true`))
	}
	if !marked {
		t.Fatal("the mark is not written once every server knows it")
	}
}
