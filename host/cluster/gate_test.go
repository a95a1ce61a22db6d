package cluster

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// gatedCluster bootstraps s1, s2 and s3 together (bootstrap_expect 3);
// s3 advertises nothing, as a release before the feature gates.
func gatedCluster(t *testing.T) (*tcluster, *node) {
	t.Helper()
	return clusterWithOld(t, func(c *Config) { c.olderThanGates = true })
}

// clusterWithOld is a three-server cluster whose s3 is configured by
// older (a release before the gates, or one lacking some features).
func clusterWithOld(t *testing.T, older func(*Config)) (*tcluster, *node) {
	t.Helper()
	tc := &tcluster{t: t}
	seed := tc.newNode("s1", "", 3)
	s2 := tc.newNode("s2", "", 0)
	old := tc.newNodeWith("s3", 0, older)
	for _, n := range []*node{s2, old} {
		if _, err := seed.c.Join(testCtx(t), n.c.Self()); err != nil {
			t.Fatal(err)
		}
	}
	l := tc.leader()
	for _, n := range tc.followers(l) { // their retry-join reaches the leader
		if _, err := l.c.Join(testCtx(t), n.c.Self()); err != nil {
			t.Fatal(err)
		}
	}
	tc.waitConverged()
	return tc, old
}

// No gated form is written while one server does not advertise the
// feature: the leader refuses a type with no older form, naming the
// server to upgrade; the features switch on, on every replica, once the
// last server advertises them; and a server that lacks an enabled
// feature can no longer join.
func TestFeatureGateWaitsForEveryServer(t *testing.T) {
	tc, old := gatedCluster(t)
	l := tc.leader()
	loadBase(t, l.c)
	for _, n := range tc.nodes {
		if got := n.c.EnabledFeatures(); len(got) != 0 {
			t.Fatalf("%s enabled %v with %s older than the gates", n.id, got, old.id)
		}
	}
	_, _, err := l.c.Apply(testCtx(t), structs.NodeFenceType, fenceReq())
	if !errors.Is(err, ErrFeatureNotEnabled) || !errors.Is(err, structs.ErrConflict) ||
		!strings.Contains(err.Error(), "upgrade s3 (volhost a version before "+GateVersion) || !strings.Contains(err.Error(), string(FeatureNodeFence)) {
		t.Fatalf("fence with s3 older: %v", err)
	}
	t.Log(err)
	if l.c.meta.hasKey() {
		t.Fatal("keyring created before every server understands it")
	}

	// s3 is upgraded: its next join (or advertise) carries its features.
	up := old.c.Self()
	up.Build, up.Features = BuildVersion, Features()
	if _, err := l.c.Join(testCtx(t), up); err != nil {
		t.Fatal(err)
	}
	tc.waitConverged()
	for _, n := range tc.nodes {
		if got := n.c.EnabledFeatures(); !slices.Equal(got, Features()) {
			t.Fatalf("%s enabled %v, want %v", n.id, got, Features())
		}
	}
	mustApply(t, l.c, structs.NodeFenceType, fenceReq())
	testutil.WaitFor(t, "the keyring", l.c.meta.hasKey)

	// Rolling s3 back now is refused: the log may hold what it cannot read.
	back := old.c.Self()
	back.Build, back.Features = "", nil
	_, err = l.c.Join(testCtx(t), back)
	if !errors.Is(err, ErrJoinRefused) || !strings.Contains(err.Error(), string(FeatureCheckpointBatch)) {
		t.Fatalf("join of an older server after enabling: %v", err)
	}
	t.Log(err)
}

// While a server does not understand them, checkpoint batches become one
// entry per checkpoint and a Free becomes its two checkpoints, and the
// release completes on every replica alike.
func TestCheckpointOlderFormsWhileGated(t *testing.T) {
	tc, _ := gatedCluster(t)
	l := tc.leader()
	loadBase(t, l.c)
	term := l.c.ReadyTerm()
	for _, a := range []string{"a1", "a2"} {
		cl := claimReq(map[string]string{"a1": "vol-sw", "a2": "vol-mw"}[a], a, map[string]string{"a1": "n1", "a2": "n2"}[a])
		cl.Term = term
		mustApply(t, l.c, structs.VolumeClaimType, cl)
	}
	mustApply(t, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", JobID: "web", ClientStatus: structs.AllocComplete},
		{ID: "a2", Namespace: "default", NodeID: "n2", JobID: "web", ClientStatus: structs.AllocComplete},
	}})
	w := l.c.ClaimWriter()
	first := l.c.LastIndex()
	for _, step := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached} {
		reqs := []*structs.ClaimCheckpointRequest{checkpointReq(l.s, "vol-sw", "a1", step, term), checkpointReq(l.s, "vol-mw", "a2", step, term)}
		errs := make(chan error, len(reqs))
		for _, r := range reqs {
			r.Free = step == structs.ClaimControllerDetached
			go func() { _, err := w.CheckpointClaim(testCtx(t), r); errs <- err }()
		}
		for range reqs {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, vol := range []string{"vol-sw", "vol-mw"} {
		if st := claimState(l.s, vol, map[string]string{"vol-sw": "a1", "vol-mw": "a2"}[vol]); st != "gone" {
			t.Fatalf("%s claim %s, want freed", vol, st)
		}
	}
	// Every entry since is a single checkpoint, never a batch: 2 at
	// node-detached, 2 x 2 for the frees.
	var types []structs.MessageType
	for i := first + 1; i <= l.c.LastIndex(); i++ {
		var lg raft.Log
		if err := l.c.logs.GetLog(i, &lg); err != nil || lg.Type != raft.LogCommand {
			continue
		}
		types = append(types, structs.MessageType(lg.Data[0]))
	}
	if want := slices.Repeat([]structs.MessageType{structs.ClaimCheckpointType}, 6); !slices.Equal(types, want) {
		t.Fatalf("entries %v, want %v", types, want)
	}
	tc.waitConverged()
}

// An entry of a type this binary does not know stops the FSM: the entry
// is named with the version it needs, nothing of it or after it is
// applied, and no snapshot can be taken past it.
func TestFSMStopsAtUnknownEntry(t *testing.T) {
	s := state.NewStore()
	var halts []error
	f := &fsm{store: s, meta: newMeta(), logger: hclog.NewNullLogger(), halt: func(err error) { halts = append(halts, err) }}
	gc, err := encodeCommand(structs.ClaimGCType, time.Now(), &structs.ClaimGCRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The log recorded, when the feature was enabled, the type it covers.
	enable, _ := encodeMeta(featuresEnableType, metaCommand{Enable: []EnabledFeature{{Name: "claim-publishing", Since: "0.3.0", Types: []uint16{105}}}})
	if res := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: enable}).(fsmResult); res.err != nil {
		t.Fatal(res.err)
	}
	before := digest(t, s)
	res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte{105, '{', '}'}}).(fsmResult)
	var ue *UnknownEntryError
	if !errors.As(res.err, &ue) || ue.Index != 2 || ue.Type != 105 || len(halts) != 1 {
		t.Fatalf("got %v, halts %v", res.err, halts)
	}
	for _, want := range []string{"entry 2", "type 105", `"claim-publishing"`, "volhost 0.3.0 or later", "rather than skip it"} {
		if !strings.Contains(res.err.Error(), want) {
			t.Fatalf("%q does not say %q", res.err, want)
		}
	}
	t.Log(res.err)
	if res := f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: gc}).(fsmResult); !errors.As(res.err, &ue) {
		t.Fatalf("entry after the unknown one: %v", res.err)
	}
	if digest(t, s) != before || f.applied != 1 {
		t.Fatalf("state moved past the unknown entry (applied %d)", f.applied)
	}
	if _, err := f.Snapshot(); err == nil {
		t.Fatal("snapshot taken past an entry never applied")
	}
	// An unknown cluster command stops it too; without a feature record
	// the message says a newer volhost wrote it.
	g := &fsm{store: state.NewStore(), meta: newMeta(), logger: hclog.NewNullLogger(), halt: func(error) {}}
	res = g.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: []byte{230, '{', '}'}}).(fsmResult)
	if !errors.As(res.err, &ue) || !strings.Contains(res.err.Error(), "a newer volhost") {
		t.Fatalf("unknown cluster command: %v", res.err)
	}
	// Without a hook it panics: the process stops, naming the entry.
	h := &fsm{store: state.NewStore(), meta: newMeta(), logger: hclog.NewNullLogger()}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("no panic")
			}
		}()
		h.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte{105, '{', '}'}})
	}()
}

// The gate table covers every gated type once, and every type the codec
// decodes is either in the table or one releases before the gates knew.
func TestGateTableCoversNewTypes(t *testing.T) {
	seen := map[structs.MessageType]Feature{}
	for _, g := range gates {
		if g.Since == "" || (len(g.Types) == 0 && len(g.Meta) == 0 && g.Uses == nil) {
			t.Errorf("row %s: no version or nothing gated", g.Feature)
		}
		for _, ty := range g.Types {
			if f, dup := seen[ty]; dup {
				t.Errorf("type %d gated by %s and %s", ty, f, g.Feature)
			}
			seen[ty] = g.Feature
		}
	}
	for ty := 1; ty < 200; ty++ {
		if _, err := newRequest(structs.MessageType(ty)); err != nil {
			continue
		}
		if _, ok := seen[structs.MessageType(ty)]; !ok && !legacyType(structs.MessageType(ty)) {
			t.Errorf("log entry type %d is neither gated (gate.go) nor one servers older than the gates understand: add its row", ty)
		}
	}
}

func fenceReq() *structs.NodeFenceRequest {
	return &structs.NodeFenceRequest{NodeID: "n1", Fence: &structs.NodeFence{Reason: "powered off", Source: "operator", Time: time.Now()}}
}

// A gated write that reaches a new leader before its step-up recorded the
// servers' features waits for the step-up instead of being refused: the
// first `acl bootstrap` of a fresh cluster, sent as soon as a leader was
// elected, was answered "upgrade s2" by a cluster of one version.
func TestGatedWriteWaitsForStepUp(t *testing.T) {
	for range 5 {
		tc := &tcluster{t: t}
		n := tc.newNode("s1", "", 1)
		// As soon as raft says leader: the barrier, the feature records
		// and the enabling may all be ahead.
		for !n.c.IsLeader() {
			runtime.Gosched()
		}
		_, _, err := n.c.Apply(testCtx(t), structs.ACLBootstrapType, &structs.ACLBootstrapRequest{Token: &structs.ACLToken{
			AccessorID: "a1", SecretHash: strings.Repeat("ab", 32), Type: structs.ACLManagementToken}})
		if err != nil {
			t.Fatalf("a gated write during step-up: %v", err)
		}
		if !n.c.FeatureEnabled(FeatureACL) {
			t.Fatal("the ACL entry committed before its feature was enabled")
		}
		_ = n.c.Shutdown()
	}
}
