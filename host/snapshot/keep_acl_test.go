package snapshot

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

func tokenIDs(t *testing.T, s *state.Store) []string {
	t.Helper()
	toks, err := s.Snapshot().ACLTokens(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tok := range toks {
		ids = append(ids, tok.AccessorID)
	}
	return ids
}

// A snapshot saved before the ACL bootstrap, restored over a cluster that
// bootstrapped, keeps the cluster's ACL state whole (mark, policies,
// tokens, and table indexes that never go back) and brings its data; the
// result is a state whose rows pass every check again (it is what raft
// installs on the followers). A snapshot that bootstrapped keeps its own,
// and over a cluster that never bootstrapped nothing is kept.
// aclOf is Options.KeepACLOf for a cluster whose state is s.
func aclOf(s *state.Store) func() (*state.Snapshot, error) {
	return func() (*state.Snapshot, error) { return s.Snapshot(), nil }
}

func TestKeepACLOf(t *testing.T) {
	kr := newKeyring(t)
	cluster := testStore(t) // bootstrapped, policy ops, tokens boot and t1
	pre := state.NewStore()
	if _, err := pre.Apply(5, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "old-plugin"}}); err != nil {
		t.Fatal(err)
	}
	preRaw := save(t, pre, kr, "c1")

	h, got, err := Read(bytes.NewReader(preRaw), kr, Options{ClusterID: "c1", KeepACLOf: aclOf(cluster)})
	if err != nil {
		t.Fatal(err)
	}
	snap := got.Snapshot()
	wantIdx, _ := cluster.Snapshot().ACLBootstrapIndex()
	if idx, _ := snap.ACLBootstrapIndex(); !h.KeptACL || idx == 0 || idx != wantIdx {
		t.Fatalf("kept %v, bootstrap index %d, want %d", h.KeptACL, idx, wantIdx)
	}
	if ids := tokenIDs(t, got); !slices.Equal(ids, []string{"boot", "t1"}) {
		t.Fatalf("tokens %v", ids)
	}
	if p, _ := snap.ACLPolicyByName(nil, "ops"); p == nil {
		t.Fatal("policy dropped")
	}
	if p, _ := snap.PluginByID(nil, "old-plugin"); p == nil {
		t.Fatal("the snapshot's data was not restored")
	}
	for _, tbl := range []string{state.TableACLTokens, state.TableACLPolicies, state.TableACLBootstrap} {
		have, _ := snap.Index(tbl)
		want, _ := cluster.Snapshot().Index(tbl)
		if have < want || want == 0 {
			t.Fatalf("index of %s went back: %d, cluster's %d", tbl, have, want)
		}
	}
	// What the leader hands raft is a state every row check accepts.
	again, err := func() (*state.Store, error) {
		_, s, err := Read(bytes.NewReader(save(t, got, kr, "c1")), kr, Options{ClusterID: "c1"})
		return s, err
	}()
	if err != nil || digest(t, again) != digest(t, got) {
		t.Fatalf("the kept state does not read back: %v", err)
	}

	// A cluster that never bootstrapped: nothing to keep.
	h, got, err = Read(bytes.NewReader(preRaw), kr, Options{ClusterID: "c1", KeepACLOf: aclOf(state.NewStore())})
	if err != nil {
		t.Fatal(err)
	}
	if idx, _ := got.Snapshot().ACLBootstrapIndex(); h.KeptACL || idx != 0 {
		t.Fatalf("kept %v, bootstrap index %d over a cluster that never bootstrapped", h.KeptACL, idx)
	}

	// Another cluster's snapshot that bootstrapped brings its own ACL
	// state (this cluster's own never does: TestRestoreNeverRevivesARevokedToken).
	other := state.NewStore()
	if _, err := other.Apply(3, structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: &structs.ACLToken{
		AccessorID: "other-boot", SecretHash: strings.Repeat("c", 64), Type: structs.ACLManagementToken}}); err != nil {
		t.Fatal(err)
	}
	h, got, err = Read(bytes.NewReader(save(t, cluster, kr, "c1")), kr, Options{ClusterID: "c2", ForceForeign: true, KeepACLOf: aclOf(other)})
	if err != nil {
		t.Fatal(err)
	}
	if ids := tokenIDs(t, got); h.KeptACL || !slices.Equal(ids, []string{"boot", "t1"}) {
		t.Fatalf("kept %v, tokens %v: want the snapshot's own", h.KeptACL, ids)
	}
}
