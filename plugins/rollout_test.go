package plugins

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
)

// policyReq is a one-claim request on namespace/id for a complete
// allocation that ended ageMs ago; ctx goes into the volume context.
func policyReq(id string, ageMs int64, ctx map[string]string) *abi.PolicyRequest {
	return &abi.PolicyRequest{NowUnixMs: 1_700_000_000_000,
		Volume: abi.VolumeView{Namespace: "default", ID: id, PluginID: "p", Context: ctx},
		Claims: []abi.ClaimView{{AllocID: "a-" + id, NodeID: "n1", Mode: "write", State: "taken"}},
		Allocs: []abi.AllocView{{ID: "a-" + id, ClientStatus: "complete", TerminalAgeMs: ageMs}},
		Nodes:  []abi.NodeView{{ID: "n1", Status: "ready"}},
	}
}

const servingManifest = `kind = "release-policy"
version = "1.0.0"
default = true
`

// TestShadowPromoteRollback: a shadow (grace-policy) answers beside the
// serving default policy and never acts; its disagreements are counted and
// evented with both answers; promote makes it serve with the old one kept
// as last known good; rollback returns, and a reload does not bring the
// rolled-back files back.
func TestShadowPromoteRollback(t *testing.T) {
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "policy", exampleWasm(t, "default-policy"), []byte(servingManifest))
	}, nil)
	ctx := context.Background()
	writeModule(t, e.dir, "policy", exampleWasm(t, "grace-policy"), []byte(`kind = "release-policy"
version = "2.0.0"
default = true
mode = "shadow"
config = { grace = "30s" }
`))
	if _, err := e.m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := e.m.StatusOf("policy")
	if st.Version != "1.0.0" || st.Shadow == nil || st.Shadow.Version != "2.0.0" {
		t.Fatalf("after the shadow load: %+v", st)
	}
	// Three volumes: the shadow disagrees on the one whose allocation
	// ended 10 s ago (it would wait out its grace).
	for i, age := range []int64{60_000, 10_000, 120_000} {
		resp, err := e.m.DecideRelease(ctx, "policy", policyReq(string(rune('a'+i)), age, nil))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Decisions[0].Action != abi.ActionRelease {
			t.Fatalf("volume %d: the serving generation's answer is %+v, want release (the shadow never acts)", i, resp.Decisions[0])
		}
	}
	st, _ = e.m.StatusOf("policy")
	if sh := st.Shadow; sh.Calls != 3 || sh.Disagreements != 1 || sh.AgreementPercent < 66 || sh.AgreementPercent > 67 ||
		sh.LastDisagreementNamespace != "default" {
		t.Fatalf("shadow status %+v: want 3 calls, 1 disagreement, 66.7%%, the last about a volume of default", sh)
	}
	dis := e.eventsOf(EventShadowDisagreed)
	// Both answers in words, and the volume (`"Action":1` against
	// `"Action":2`, with no volume, told an operator nothing).
	if len(dis) != 1 || !strings.HasPrefix(dis[0].Reason, "volume default/b: ") || !strings.Contains(dis[0].Reason, "answered [a-b release (") ||
		!strings.Contains(dis[0].Reason, "answered [a-b wait ") || dis[0].Namespace != "default" || dis[0].VolumeID != "b" {
		t.Fatalf("disagreement events %+v: want one with both answers and the volume", dis)
	}

	if _, err := e.m.Rollback(ctx, "policy"); !errors.Is(err, ErrNoLastKnownGood) {
		t.Fatalf("rollback before any promote: %v", err)
	}
	st, err := e.m.Promote(ctx, "policy")
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "2.0.0" || !st.Promoted || st.Shadow != nil || st.LastKnownGood == nil || st.LastKnownGood.Version != "1.0.0" {
		t.Fatalf("after promote: %+v", st)
	}
	if resp, _ := e.m.DecideRelease(ctx, "policy", policyReq("b", 10_000, nil)); resp.Decisions[0].Action != abi.ActionWait {
		t.Fatalf("the promoted generation does not serve: %+v", resp)
	}
	if _, err := e.m.Promote(ctx, "policy"); !errors.Is(err, ErrNoShadow) {
		t.Fatalf("second promote: %v", err)
	}
	// The last known good answers for on_failure = "last_known_good".
	if resp, err := e.m.DecideReleaseLastKnownGood(ctx, "policy", 0, policyReq("b", 10_000, nil)); err != nil || resp.Decisions[0].Action != abi.ActionRelease {
		t.Fatalf("last known good: %+v, %v", resp, err)
	}

	st, err = e.m.Rollback(ctx, "policy")
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "1.0.0" || st.LastKnownGood != nil || !strings.Contains(st.Refusal, "rolled back") {
		t.Fatalf("after rollback: %+v", st)
	}
	if _, err := e.m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.m.StatusOf("policy"); st.Version != "1.0.0" || st.Shadow != nil {
		t.Fatalf("a reload brought the rolled-back files back: %+v", st)
	}
	if len(e.eventsOf(EventPromoted)) != 1 || len(e.eventsOf(EventRolledBack)) != 1 {
		t.Fatalf("events %+v", e.events)
	}
	if _, err := e.m.Promote(ctx, "nope"); !errors.Is(err, ErrNoModule) {
		t.Fatalf("promote of an unknown module: %v", err)
	}
}

// TestAutoRollback: a promoted generation that faults rollback.max_faults
// times within rollback.window is rolled back, with an event, and the last
// known good serves the next call.
func TestAutoRollback(t *testing.T) {
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "policy", exampleWasm(t, "default-policy"), []byte(servingManifest))
	}, nil)
	ctx := context.Background()
	writeModule(t, e.dir, "policy", exampleWasm(t, "fault-policy"), []byte(`kind = "release-policy"
version = "2.0.0"
default = true
mode = "shadow"
rollback {
  max_faults = 2
  window = "1m"
}
`))
	if _, err := e.m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Promote(ctx, "policy"); err != nil {
		t.Fatal(err)
	}
	trap := map[string]string{"fault.mode": "trap"}
	if _, err := e.m.DecideRelease(ctx, "policy", policyReq("x", 1000, trap)); err == nil {
		t.Fatal("the trap mode did not trap")
	}
	// A fault outside the window does not count with the next one.
	e.clock.Advance(2 * time.Minute)
	if _, err := e.m.DecideRelease(ctx, "policy", policyReq("x", 1000, trap)); err == nil {
		t.Fatal("the trap mode did not trap")
	}
	if st, _ := e.m.StatusOf("policy"); st.Version != "2.0.0" || len(st.RecentFaults) != 2 || st.RecentFaults[0].Kind != "trap" ||
		st.RecentFaults[0].Namespace != "default" || st.RecentFaults[0].VolumeID != "x" {
		t.Fatalf("rolled back too early, or faults not shown with their volume: %+v", st)
	}
	if _, err := e.m.DecideRelease(ctx, "policy", policyReq("x", 1000, trap)); err == nil {
		t.Fatal("the trap mode did not trap")
	}
	st, _ := e.m.StatusOf("policy")
	if st.Version != "1.0.0" || st.Promoted || !strings.Contains(st.Refusal, "automatically: 2 faults within rollback.window = 1m0s") {
		t.Fatalf("after two faults within the window: %+v", st)
	}
	if ev := e.eventsOf(EventRolledBack); len(ev) != 1 || !strings.Contains(ev[0].Reason, "automatically") {
		t.Fatalf("rollback events %+v", ev)
	}
	if resp, err := e.m.DecideRelease(ctx, "policy", policyReq("x", 1000, trap)); err != nil || resp.Decisions[0].Action != abi.ActionRelease {
		t.Fatalf("the last known good does not serve: %+v %v", resp, err)
	}
}

// TestShadowWithoutServing: a shadow with nothing to shadow is refused,
// naming why; a bad mode or on_failure is refused by the manifest parser.
func TestShadowWithoutServing(t *testing.T) {
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "lonely", exampleWasm(t, "default-policy"), []byte("kind = \"release-policy\"\nmode = \"shadow\"\n"))
	}, nil)
	if st, _ := e.m.StatusOf("lonely"); st.State != StateRefused || !strings.Contains(st.Refusal, "no generation of lonely serves to be shadowed") {
		t.Fatalf("status %+v", st)
	}
	for _, src := range []string{"kind = \"release-policy\"\nmode = \"canary\"\n", "kind = \"release-policy\"\non_failure = \"pray\"\n",
		"kind = \"release-policy\"\nrollback {\n max_faults = 0\n}\n"} {
		if _, err := ParseManifest("x.hcl", []byte(src)); err == nil {
			t.Errorf("manifest %q accepted", src)
		}
	}
}

// TestShadowUpload: `module shadow` loads a candidate beside the serving
// generation (the serving manifest unless one is given); a promoted upload
// survives reloads of the directory's older files; bad candidates are
// refused with ErrCandidate and change nothing.
func TestShadowUpload(t *testing.T) {
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "policy", exampleWasm(t, "default-policy"), []byte(servingManifest))
	}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		wasm []byte
		man  string
		want string
	}{
		{[]byte("not wasm"), "", "not a valid module"},
		{exampleWasm(t, "grace-policy"), "kind = \"csi-adapter\"\n", "cannot shadow"},
		{exampleWasm(t, "grace-policy"), "kind = \"release-policy\"\nlimits {\n call_timeout = \"1h\"\n}\n", "max_call_timeout"},
	} {
		var man []byte
		if tc.man != "" {
			man = []byte(tc.man)
		}
		if _, err := e.m.Shadow(ctx, "policy", tc.wasm, man); !errors.Is(err, ErrCandidate) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Shadow(%q): %v, want a refusal naming %q", tc.man, err, tc.want)
		}
	}
	if st, _ := e.m.StatusOf("policy"); st.Shadow != nil {
		t.Fatalf("a refused candidate shadows: %+v", st.Shadow)
	}
	if _, err := e.m.Shadow(ctx, "nope", exampleWasm(t, "grace-policy"), nil); !errors.Is(err, ErrNoModule) {
		t.Fatalf("shadow of an unknown module: %v", err)
	}
	st, err := e.m.Shadow(ctx, "policy", exampleWasm(t, "grace-policy"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Shadow == nil || st.Shadow.Generation != 2 || st.Version != "1.0.0" {
		t.Fatalf("after the upload: %+v", st)
	}
	if _, err := e.m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.m.StatusOf("policy"); st.Shadow == nil {
		t.Fatal("a reload of unchanged files dropped the shadow")
	}
	if _, err := e.m.Promote(ctx, "policy"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.m.DecideRelease(ctx, "policy", policyReq("b", 10_000, nil)); resp.Decisions[0].Action != abi.ActionWait {
		t.Fatalf("a reload put the directory's older files back over the promoted upload: %+v", resp)
	}
}
