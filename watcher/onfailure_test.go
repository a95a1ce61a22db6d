package watcher

import (
	"context"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
)

// TestOnFailure: a trapping policy with on_failure = "native" has its
// volumes judged by the built-in default policy, whose answer the watcher
// checks like any other; a running allocation's claim is never even asked
// about; with "wait" the claim waits with the module's fault on it.
func TestOnFailure(t *testing.T) {
	fx := newFixture(t, Config{MaxAttempts: 10, StuckAfter: time.Hour}, nil)
	m := newWasmManager(t, fx.clock,
		moduleFile{name: "trap-native", example: "fault-policy",
			manifest: policyManifest(`volumes = ["default/native-*"]`, "config = { mode = \"trap\" }\non_failure = \"native\"")},
		moduleFile{name: "trap-wait", example: "fault-policy",
			manifest: policyManifest(`volumes = ["default/wait-*"]`, `config = { mode = "trap" }`)})
	obs := newRecordingObserver()
	fx.w.mods = WasmModules(m, obs)
	for id, status := range map[string]structs.AllocClientStatus{
		"native-done": structs.AllocComplete, "native-running": structs.AllocRunning, "wait-done": structs.AllocComplete,
	} {
		fx.store.putAlloc("a-"+id, testNode, status)
		fx.store.putVolume(newVolume(id, newClaim("a-"+id, testNode, structs.ClaimTaken)))
	}
	ctx := context.Background()
	for _, id := range []string{"native-done", "native-running", "wait-done"} {
		if _, err := fx.w.assess(ctx, ref(id)); err != nil {
			t.Fatal(err)
		}
	}
	if c := fx.store.claim(ref("native-done"), "a-native-done"); c != nil {
		t.Fatalf("on_failure = native: the default policy's release did not happen: %+v", c)
	}
	if c := fx.store.claim(ref("native-running"), "a-native-running"); c == nil || c.State != structs.ClaimTaken || c.LastError != nil {
		t.Fatalf("on_failure = native: a running allocation's claim: %+v, want taken and waiting", c)
	}
	c := fx.store.claim(ref("wait-done"), "a-wait-done")
	if c == nil || c.LastError == nil || c.LastError.Fault != string(plugins.FaultTrap) || c.LastError.Module != "trap-wait" {
		t.Fatalf("on_failure = wait: %+v, want the claim waiting with the trap on it", c)
	}
	for _, call := range fx.csi.callList() {
		if call.VolumeID != "vol-native-done" {
			t.Fatalf("CSI call %+v: only native-done may be released", call)
		}
	}
	// The module's fault is still counted against it (the running
	// allocation's volume had no claim due, so no call).
	if n := obs.count(obs.faults, "trap-native/trap"); n != 1 {
		t.Fatalf("observer saw %d traps of trap-native, want 1", n)
	}
}
