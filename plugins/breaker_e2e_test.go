package plugins

import (
	"context"
	"testing"
	"time"
)

func TestCircuitBreakerOnModule(t *testing.T) {
	faulty := exampleWasm(t, "fault-policy")
	const cooldown = 30 * time.Second
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "fault-policy", faulty, manifest("release-policy", "limits {\n call_timeout = \"5s\"\n}"))
	}, func(o *Options) { o.BreakerThreshold = 3; o.BreakerCooldown = cooldown })
	ctx := context.Background()
	call := func(mode string) error {
		_, err := e.m.DecideRelease(ctx, "fault-policy", faultRequest(mode))
		return err
	}
	calls := func() uint64 {
		st, _ := e.m.StatusOf("fault-policy")
		return st.Calls - st.Faults[string(FaultOpenCircuit)]
	}

	// Two faults, a success, then three faults: only the last run opens it.
	steps := []struct {
		mode string
		want FaultKind // "" for success
	}{
		{"error", FaultGuestError}, {"malformed", FaultBadOutput}, {"ok", ""},
		{"error", FaultGuestError}, {"error", FaultGuestError}, {"stranger", FaultBadOutput},
	}
	for i, s := range steps {
		err := call(s.mode)
		if s.want == "" {
			if err != nil {
				t.Fatalf("step %d (%s): %v", i, s.mode, err)
			}
			continue
		}
		assertFault(t, err, s.want)
	}
	got := e.eventsOf(EventCircuitOpen)
	if len(got) != 1 {
		t.Fatalf("%d circuit-open events, want 1", len(got))
	}
	// Its reason is the last fault's, about one volume: the event names
	// that volume, so only its namespace's readers see it.
	if req := faultRequest("x"); got[0].Namespace != req.Volume.Namespace || got[0].VolumeID != req.Volume.ID {
		t.Fatalf("circuit-open event names volume %s/%s, want the faulting call's %s/%s", got[0].Namespace, got[0].VolumeID, req.Volume.Namespace, req.Volume.ID)
	}
	if st, _ := e.m.StatusOf("fault-policy"); st.State != StateOpenCircuit {
		t.Fatalf("state %s, want open-circuit", st.State)
	}
	// Open: even a good request fails fast without reaching the module.
	before := calls()
	assertFault(t, call("ok"), FaultOpenCircuit)
	if calls() != before {
		t.Fatal("an open circuit let a call reach the module")
	}
	e.clock.Advance(cooldown - time.Second)
	assertFault(t, call("ok"), FaultOpenCircuit)
	// Half-open after the cool-down: the trial call fails, it reopens.
	e.clock.Advance(time.Second)
	assertFault(t, call("error"), FaultGuestError)
	assertFault(t, call("ok"), FaultOpenCircuit)
	// Next trial succeeds: closed, and calls flow again.
	e.clock.Advance(cooldown)
	if err := call("ok"); err != nil {
		t.Fatalf("trial call: %v", err)
	}
	if err := call("ok"); err != nil {
		t.Fatalf("call after close: %v", err)
	}
	if got := e.eventsOf(EventCircuitClosed); len(got) != 1 {
		t.Fatalf("%d circuit-closed events, want 1", len(got))
	}
	if st, _ := e.m.StatusOf("fault-policy"); st.State != StateServing || st.Faults[string(FaultOpenCircuit)] != 3 {
		t.Fatalf("status %+v", st)
	}
}
