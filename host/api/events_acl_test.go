package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// events:read opens GET /v1/events, and each event is then read like its
// subject: a token that cannot read a namespace sees none of its events,
// the audit trail needs operator:read, a node's events node:read on it
// and module events modules:read. The refused events stay in the state.
func TestEventsAreScopedByWhatTheTokenMayRead(t *testing.T) {
	f := newACLFixture(t)
	evs := []*structs.Event{
		{Type: structs.EventClaimTransition, Namespace: "default", VolumeID: "v1", Message: "in-default"},
		{Type: structs.EventClaimTransition, Namespace: "prod", VolumeID: "secret-vol", Message: "in-prod"},
		{Type: structs.EventNodeStatus, NodeID: "n1", Message: "node-n1"},
		{Type: structs.EventNodeStatus, NodeID: "n2", Message: "node-n2"},
		{Type: structs.EventModule, Module: "m1", Message: "module-m1"},
		{Type: structs.EventAudit, Fields: map[string]string{"action": "system-gc", "accessor": "x"}, Message: "audited"},
	}
	if _, _, err := f.b.Apply(context.Background(), structs.EventAppendType, &structs.EventAppendRequest{Events: evs}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, rules string
		want        []string // the messages of the test's events it sees
	}{
		{"events and one namespace", `events { policy = "read" }
namespace "default" { policy = "read" }`, []string{"in-default"}},
		{"events and one node", `events { policy = "read" }
node_id "n1" { policy = "read" }`, []string{"node-n1"}},
		{"events and modules", `events { policy = "read" }
modules { policy = "read" }`, []string{"module-m1"}},
		{"events and operator", `events { policy = "read" }
operator { policy = "read" }`, []string{"audited"}},
		{"events alone", `events { policy = "read" }`, nil},
		{"events, every namespace denied in prod", `events { policy = "read" }
namespace "*" { policy = "read" }
namespace "prod" { policy = "deny" }`, []string{"in-default"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.policy(t, "p", tc.rules)
			secret, _ := f.token(t, "", "p")
			for _, path := range []string{"/v1/events", "/v1/events?type=audit", "/v1/events?volume_id=secret-vol&namespace=prod", "/v1/events?per_page=1"} {
				resp, body := do(t, http.MethodGet, f.ts.URL+path, "", api.TokenHeader, secret)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
				}
				var got []*structs.Event
				if err := json.Unmarshal([]byte(body), &got); err != nil {
					t.Fatal(err)
				}
				for _, e := range got {
					if slices.ContainsFunc(evs, func(x *structs.Event) bool { return x.Message == e.Message }) && !slices.Contains(tc.want, e.Message) {
						t.Errorf("%s shows %q (%s), which the policy may not read", path, e.Message, e.Type)
					}
					if e.Type == structs.EventAudit && !slices.Contains(tc.want, "audited") {
						t.Errorf("%s shows the audit event %q", path, e.Message)
					}
				}
				if path == "/v1/events" {
					var msgs []string
					for _, e := range got {
						if slices.ContainsFunc(evs, func(x *structs.Event) bool { return x.Message == e.Message }) {
							msgs = append(msgs, e.Message)
						}
					}
					if !slices.Equal(msgs, tc.want) {
						t.Errorf("%s shows %q, want %q", path, msgs, tc.want)
					}
				}
			}
		})
	}
	// The management token still sees every one of them: nothing was
	// dropped from the state.
	resp, body := do(t, http.MethodGet, f.ts.URL+"/v1/events", "", api.TokenHeader, f.mgmt)
	var all []*structs.Event
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &all) != nil {
		t.Fatalf("management: %d %s", resp.StatusCode, body)
	}
	for _, e := range evs {
		if !slices.ContainsFunc(all, func(x *structs.Event) bool { return x.Message == e.Message }) {
			t.Errorf("management does not see %q", e.Message)
		}
	}
}
