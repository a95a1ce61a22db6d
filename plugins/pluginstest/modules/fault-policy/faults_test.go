package main

import (
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/guest"
)

func request(namespace string, ctx map[string]string) []byte {
	req := abi.PolicyRequest{
		Volume: abi.VolumeView{Namespace: namespace, ID: "v", Context: ctx},
		Claims: []abi.ClaimView{{AllocID: "a1", NodeID: "n1", State: "taken"}},
		Allocs: []abi.AllocView{{ID: "a1", ClientStatus: "complete"}},
		Nodes:  []abi.NodeView{{ID: "n1", Status: "ready"}},
	}
	return req.MarshalAppend(nil)
}

func setMode(t *testing.T, c map[string]string) {
	t.Helper()
	saved := cfg
	t.Cleanup(func() { cfg = saved })
	if _, err := configure(c); err != nil {
		t.Fatal(err)
	}
}

// The modes that return from the call natively (trap, spin and oom end the
// wasm instance and are exercised by the host's tests in plugins/).
func TestReturningModes(t *testing.T) {
	tests := []struct {
		name       string
		config     map[string]string
		namespace  string
		ctx        map[string]string
		wantDecode bool
		wantErr    string
		wantIDs    []string
	}{
		{"ok", map[string]string{"mode": "ok"}, "default", nil, true, "", []string{"a1"}},
		{"panic", map[string]string{"mode": "panic"}, "default", nil, true, "panic: fault-policy", nil},
		{"error", map[string]string{"mode": "error"}, "default", nil, true, "deliberate error", nil},
		{"malformed", map[string]string{"mode": "malformed"}, "default", nil, false, "", nil},
		{"stranger", map[string]string{"mode": "stranger"}, "default", nil, true, "", []string{"a1", "fault-policy-stranger"}},
		{"allocate", map[string]string{"mode": "allocate", "alloc_kib": "16"}, "default", nil, true, "", []string{"a1"}},
		{"self-test namespace spared", map[string]string{"mode": "panic"}, "volhost-selftest", nil, true, "", []string{"a1"}},
		{"spare namespace configurable", map[string]string{"mode": "panic", "spare_namespace": "x"}, "volhost-selftest", nil, true, "panic", nil},
		{"request overrides config", map[string]string{"mode": "ok"}, "default", map[string]string{ContextKey: "error"}, true, "deliberate error", nil},
		{"request override beats spare", nil, "volhost-selftest", map[string]string{ContextKey: "stranger"}, true, "", []string{"a1", "fault-policy-stranger"}},
		{"unknown request mode", nil, "default", map[string]string{ContextKey: "nope"}, true, `unknown mode "nope"`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setMode(t, tc.config)
			h := &guest.Handlers{ReleaseRaw: decideRaw}
			out := h.DispatchRelease(request(tc.namespace, tc.ctx), nil)
			var resp abi.PolicyResponse
			err := resp.Unmarshal(out)
			if !tc.wantDecode {
				if err == nil {
					t.Fatalf("malformed mode answered a decodable response: %+v", resp)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantErr == "" && resp.Error != "" || !strings.Contains(resp.Error, tc.wantErr) {
				t.Fatalf("Error = %q, want ~%q", resp.Error, tc.wantErr)
			}
			var ids []string
			for _, d := range resp.Decisions {
				ids = append(ids, d.AllocID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.wantIDs, ",") {
				t.Fatalf("decisions for %v, want %v", ids, tc.wantIDs)
			}
		})
	}
}

func TestConfigureRefusesBadInput(t *testing.T) {
	tests := []struct {
		cfg     map[string]string
		wantErr string
	}{
		{map[string]string{"mode": "explode"}, `mode = "explode"`},
		{map[string]string{"alloc_kib": "-1"}, "alloc_kib"},
		{map[string]string{"alloc_kib": "lots"}, "alloc_kib"},
		{map[string]string{"colour": "red"}, `unknown config key "colour"`},
	}
	for _, tc := range tests {
		saved := cfg
		_, err := configure(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("configure(%v) = %v, want ~%q", tc.cfg, err, tc.wantErr)
		}
		if cfg != saved {
			t.Errorf("configure(%v) changed settings on error", tc.cfg)
		}
	}
}
