package plugins

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
)

// TestAdapterModule drives the csi-adapter path end to end with the GCE PD
// adapter example: request mapping and error classification.
func TestAdapterModule(t *testing.T) {
	wasm := exampleWasm(t, "gcepd-adapter")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "gcepd-adapter", wasm, manifest("csi-adapter", `plugin_ids = ["gcepd"]
limits {
  call_timeout = "5s"
}`))
	}, nil)
	ctx := context.Background()
	if name, ok := e.m.Match(abi.KindCSIAdapter, Target{Namespace: "default", VolumeID: "db", PluginID: "gcepd"}); !ok || name != "gcepd-adapter" {
		t.Fatalf("Match = %q, %v", name, ok)
	}
	resp, err := e.m.AdaptRequest(ctx, "gcepd-adapter", &abi.AdapterRequest{
		Step:   "controller-unpublish",
		Claim:  abi.ClaimView{AllocID: "a1", NodeID: "n1", Mode: "write", State: "node-detached"},
		Volume: abi.VolumeView{Namespace: "default", ID: "db", PluginID: "gcepd", ExternalID: "projects/p/zones/z/disks/db"},
		Node: abi.NodeView{ID: "n1", Status: "ready",
			Meta: map[string]string{"gce.project": "p", "gce.zone": "z", "gce.instance": "vm-1"}},
		Plugin: abi.PluginView{ID: "gcepd", PublishUnpublish: true},
	})
	if err != nil {
		t.Fatalf("AdaptRequest: %v", err)
	}
	if resp.VolumeID != "projects/p/zones/z/disks/db" || resp.NodeID != "projects/p/zones/z/instances/vm-1" {
		t.Fatalf("AdaptRequest = %+v", resp)
	}
	tests := []struct {
		code uint32
		want abi.Outcome
	}{
		{5, abi.OutcomeRetry},  // NotFound at unpublish: verify and retry (never DONE)
		{10, abi.OutcomeRetry}, // Aborted: an operation is pending
		{12, abi.OutcomeFatal}, // Unimplemented: never retry
	}
	for _, tt := range tests {
		got, err := e.m.ClassifyError(ctx, "gcepd-adapter", &abi.ClassifyRequest{
			Step: "controller-unpublish", Code: tt.code, Message: "x", PluginID: "gcepd", VolumeID: "db"})
		if err != nil {
			t.Fatalf("ClassifyError(%d): %v", tt.code, err)
		}
		if got.Outcome != tt.want {
			t.Errorf("ClassifyError(%d) = %v, want %v", tt.code, got.Outcome, tt.want)
		}
	}
	// A guest error (no external ID) is a typed fault carrying the reason.
	_, err = e.m.AdaptRequest(ctx, "gcepd-adapter", &abi.AdapterRequest{Step: "controller-unpublish",
		Volume: abi.VolumeView{Namespace: "default", ID: "db"}})
	if fe := assertFault(t, err, FaultGuestError); !strings.Contains(fe.Error(), "external ID") {
		t.Errorf("guest error %q does not say why", fe)
	}
}

// TestLoadTimeRefusals covers the modules that must never serve: a wrong
// ABI version and a forbidden import, each refused with a message naming
// what is wrong.
func TestLoadTimeRefusals(t *testing.T) {
	version := exampleWasm(t, "fault-version")
	imports := exampleWasm(t, "fault-import")
	panics, err := os.ReadFile(filepath.Join("testdata", "modules", "wazero-validator-panic.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "fault-version", version, manifest("release-policy", ""))
		writeModule(t, dir, "fault-import", imports, manifest("release-policy", ""))
		writeModule(t, dir, "validator-panic", panics, manifest("release-policy", ""))
	}, nil)
	tests := []struct{ name, want string }{
		{"fault-version", "module speaks ABI v99, host speaks v1"},
		{"fault-import", "imports env.forbidden"},
		// wazero's validator panics on this binary; the agent must not.
		{"validator-panic", "wazero panicked validating the module"},
	}
	for _, tt := range tests {
		st, _ := e.m.StatusOf(tt.name)
		if st.State != StateRefused || !strings.Contains(st.Refusal, tt.want) {
			t.Errorf("%s: state %s refusal %q, want refused with %q", tt.name, st.State, st.Refusal, tt.want)
		}
	}
	if n := e.m.runtimes.Load(); n != 0 {
		t.Errorf("%d runtimes left open by refused modules", n)
	}
}

// An adapter's declared steps (ConfigureResponse.adapt_steps) are shown in
// its status and decide which steps the host asks it about.
func TestAdaptSteps(t *testing.T) {
	wasm := exampleWasm(t, "gcepd-adapter")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "gcepd-adapter", wasm, manifest("csi-adapter", `plugin_ids = ["gcepd"]`))
	}, nil)
	st, ok := e.m.StatusOf("gcepd-adapter")
	if want := []string{abi.StepControllerPublish, abi.StepControllerUnpublish}; !ok || !slices.Equal(st.AdaptSteps, want) {
		t.Fatalf("status adapt steps %q, want %q", st.AdaptSteps, want)
	}
	for step, want := range map[string]bool{
		abi.StepControllerUnpublish: true, abi.StepControllerPublish: true,
		abi.StepNodeUnpublish: false, abi.StepNodeUnstage: false,
	} {
		if got := e.m.AdaptsStep("gcepd-adapter", step); got != want {
			t.Errorf("AdaptsStep(%s) = %v, want %v", step, got, want)
		}
	}
	// Unknown modules are asked (and fail with their own fault): fail closed.
	if !e.m.AdaptsStep("no-such-module", abi.StepNodeUnpublish) {
		t.Error("AdaptsStep of an unknown module is false")
	}
}

func TestCheckAdaptSteps(t *testing.T) {
	tests := []struct {
		name    string
		kind    abi.Kind
		steps   []string
		want    []string
		wantErr string
	}{
		{"none: every step", abi.KindCSIAdapter, nil, nil, ""},
		{"known steps", abi.KindCSIAdapter, []string{"controller-unpublish"}, []string{"controller-unpublish"}, ""},
		{"misspelt step refused", abi.KindCSIAdapter, []string{"controller-unpublish", "node-unpublsh"}, nil, `unknown step "node-unpublsh"`},
		{"policy may not declare", abi.KindReleasePolicy, []string{"node-unpublish"}, nil, "declared by a release-policy module"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkAdaptSteps(tc.kind, tc.steps)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want ~%q", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("steps %q, want %q", got, tc.want)
			}
		})
	}
}
