package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/guest"
)

// The module's logic as the host sees it: bytes in, bytes out through the
// SDK dispatch, with the handlers main.go registers.
func TestModuleDecisions(t *testing.T) {
	h := &guest.Handlers{Configure: configure, ReleaseInto: decide}
	var cresp abi.ConfigureResponse
	if err := cresp.Unmarshal(h.DispatchConfigure((&abi.ConfigureRequest{ModuleName: "default-policy"}).MarshalAppend(nil), nil)); err != nil {
		t.Fatal(err)
	}
	if cresp.Version != version || cresp.Error != "" {
		t.Fatalf("configure = %+v", cresp)
	}
	req := &abi.PolicyRequest{
		NowUnixMs: 1,
		Claims: []abi.ClaimView{
			{AllocID: "run", NodeID: "n1", State: "taken"},
			{AllocID: "done", NodeID: "n1", State: "taken"},
			{AllocID: "dead-node", NodeID: "n2", State: "taken"},
			{AllocID: "vanished", NodeID: "n3", State: "controller-detached"},
		},
		Allocs: []abi.AllocView{{ID: "run", ClientStatus: "running"}, {ID: "done", ClientStatus: "complete"}, {ID: "dead-node", ClientStatus: "lost"}},
		Nodes:  []abi.NodeView{{ID: "n1", Status: "ready"}, {ID: "n2", Status: "down"}},
	}
	var resp abi.PolicyResponse
	if err := resp.Unmarshal(h.DispatchRelease(req.MarshalAppend(nil), nil)); err != nil {
		t.Fatal(err)
	}
	want := []abi.Action{abi.ActionWait, abi.ActionRelease, abi.ActionReleaseSkipNode, abi.ActionRelease}
	var got []abi.Action
	for _, d := range resp.Decisions {
		got = append(got, d.Action)
	}
	if resp.Error != "" || !reflect.DeepEqual(got, want) {
		t.Fatalf("actions %v (error %q), want %v", got, resp.Error, want)
	}
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		name    string
		cfg     map[string]string
		wantErr string
	}{
		{"no config", nil, ""},
		{"unknown keys named", map[string]string{"grace": "1s", "b": "x"}, `["b" "grace"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := configure(tc.cfg)
			if v != version {
				t.Fatalf("version %q", v)
			}
			if (tc.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want ~%q", err, tc.wantErr)
			}
		})
	}
}
