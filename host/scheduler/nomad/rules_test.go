package nomad

import (
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// TestDecide is the bridge's status rule: the client status alone says
// whether an allocation runs (never the desired status), and lost is
// released only on a fence, the node's return, or its removal.
func TestDecide(t *testing.T) {
	ready := nodeView{InNomad: true, Status: nodeReady}
	down := nodeView{InNomad: true, Status: nodeDown}
	cases := []struct {
		name   string
		client string
		node   nodeView
		want   structs.AllocClientStatus
		held   string // a word the hold's reason says
	}{
		{"pending is live", clientPending, ready, structs.AllocPending, ""},
		{"running is live", clientRunning, ready, structs.AllocRunning, ""},
		// A disconnected client's allocation (max_client_disconnect): its
		// tasks may run.
		{"unknown is live", clientUnknown, nodeView{InNomad: true, Status: nodeDisconnected}, structs.AllocRunning, ""},
		{"pending on a down node is live", clientPending, down, structs.AllocPending, ""},
		{"complete ends", clientComplete, ready, structs.AllocComplete, ""},
		{"failed ends", clientFailed, down, structs.AllocFailed, ""},
		{"lost on a down node is held", clientLost, down, "", "fenced"},
		{"lost on a disconnected node is held", clientLost, nodeView{InNomad: true, Status: nodeDisconnected}, "", "disconnected"},
		{"lost on a fenced node ends", clientLost, nodeView{InNomad: true, Status: nodeDown, Fenced: true}, structs.AllocLost, ""},
		{"lost on a node gone from Nomad ends", clientLost, nodeView{InNomad: false}, structs.AllocLost, ""},
		// Nomad reports the node ready before its client has stopped
		// what it lost: the client's next report ends it.
		{"lost on a node that came back is held", clientLost, ready, "", "until the client reports"},
		{"vanished on a down node is held", clientVanished, down, "", "fenced"},
		{"vanished on a ready node ends", clientVanished, ready, structs.AllocLost, ""},
		{"vanished on a fenced node ends", clientVanished, nodeView{InNomad: true, Status: nodeDown, Fenced: true}, structs.AllocLost, ""},
		{"a status the bridge does not know is held as live", "exploded", ready, "", "unknown Nomad client status"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := decide(tc.client, tc.node)
			if tc.held != "" {
				if !v.Held || !strings.Contains(v.Reason, tc.held) {
					t.Fatalf("decide = %+v, want held saying %q", v, tc.held)
				}
				return
			}
			if v.Held || v.Status != tc.want {
				t.Fatalf("decide = %+v, want %s", v, tc.want)
			}
		})
	}
}

// TestParseVolumes: the group meta keys a Nomad user writes.
func TestParseVolumes(t *testing.T) {
	meta := map[string]string{
		"volhost_volume_data":  "v1",
		"volhost_volume_logs":  "ops/v2:read",
		"volhost_volume_cache": "v3:write",
		"volhost_volume_bad":   "v4:rw",
		"volhost_volume_dup":   "prod/v1",
		"volhost_volume_empty": "",
		"other":                "x",
	}
	got, errs := parseVolumes(meta, DefaultMetaPrefix, "prod")
	var refs []string
	for _, r := range got {
		refs = append(refs, r.ref()+":"+string(r.Mode))
	}
	want := "prod/v3:write prod/v1:write ops/v2:read"
	if strings.Join(refs, " ") != want {
		t.Fatalf("volumes = %v, want %s", refs, want)
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	all := strings.Join(msgs, "\n")
	for _, w := range []string{"volhost_volume_bad", "mode must be read or write", "volhost_volume_dup", "already declared by volhost_volume_data", "volhost_volume_empty"} {
		if !strings.Contains(all, w) {
			t.Errorf("errors %q do not say %q", all, w)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	s, err := Config{}.Validate()
	if err != nil || s.NodeID != NodeIDFromName || s.Relist != DefaultRelistInterval || s.Address != "http://127.0.0.1:4646" {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	for _, c := range []Config{{NodeID: "hostname"}, {RelistInterval: "soon"}, {RetryMax: "-1s"}, {TLS: &TLSConfig{ClientCert: "c"}}} {
		if _, err := c.Validate(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
}
