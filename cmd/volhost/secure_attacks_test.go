package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/structs"
)

// attackTarget is what the attacks need from TestSecureBinaryCluster's
// running cluster: an HTTPS client with the CLI's client certificate,
// the leader's API, the management secret, and a way to make tokens.
type attackTarget struct {
	hc     *http.Client
	leader string // host:port of the leader's HTTPS API
	mgmt   string // management secret
	// token applies policy rules under name and returns a secret.
	token func(name, rules string) string
}

func (a *attackTarget) do(t *testing.T, method, path, body, secret string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "https://"+a.leader+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(api.TokenHeader, secret)
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// secureAttacks runs the attacks that need only the HTTP API against the
// real binaries (every role bounded on every interface; SECURITY.md):
// each is refused and changes nothing.
func secureAttacks(t *testing.T, a *attackTarget) {
	// (c) A node-scoped token cannot steer the leader through PUT
	// /v1/nodes: each operator field is 403, and the node is unchanged.
	nodeTok := a.token("node1-only", `node_id "node1" { policy = "write" }`)
	_, before := a.do(t, http.MethodGet, "/v1/node/node1", "", a.mgmt)
	for field, node := range map[string]string{
		"agent false + endpoint": `{"id":"node1","plugins":{"gce-pd":{"endpoint":"unix:///var/run/docker.sock"}}}`,
		"root_dir":               `{"id":"node1","root_dir":"/etc"}`,
		"fence":                  `{"id":"node1","fence":{"reason":"mine","source":"operator","time":"2026-12-01T00:00:00Z"}}`,
		"heartbeat_lost":         `{"id":"node1","heartbeat_lost":true}`,
		"status_reason":          `{"id":"node1","status_reason":"owned"}`,
		"agent true":             `{"id":"node1","agent":true}`,
	} {
		code, body := a.do(t, http.MethodPut, "/v1/nodes", `{"node":`+node+`}`, nodeTok)
		if code != http.StatusForbidden {
			t.Errorf("node token sets %s: %d %s, want 403", field, code, body)
		}
	}
	if _, after := a.do(t, http.MethodGet, "/v1/node/node1", "", a.mgmt); after != before {
		t.Errorf("node1 changed under refused registrations:\nbefore %s\nafter  %s", before, after)
	}

	// (d) Look-alike IDs are refused with one clear 400 naming the code
	// point, and nothing is registered.
	for name, vol := range map[string]string{
		"Hangul filler":      `{"id":"vol1\u3164","namespace":"default","external_id":"x1","plugin_id":"gce-pd","access_mode":"single-node-writer","attachment_mode":"file-system"}`,
		"Cyrillic o":         `{"id":"v\u043el1","namespace":"default","external_id":"x2","plugin_id":"gce-pd","access_mode":"single-node-writer","attachment_mode":"file-system"}`,
		"variation selector": `{"id":"vol9","namespace":"default\ufe0f","external_id":"x3","plugin_id":"gce-pd","access_mode":"single-node-writer","attachment_mode":"file-system"}`,
	} {
		code, body := a.do(t, http.MethodPut, "/v1/volumes", `{"volumes":[`+vol+`]}`, a.mgmt)
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, "U+") || !strings.Contains(e.Error, "is not allowed") {
			t.Errorf("look-alike volume (%s): %d %s, want one 400 naming the code point", name, code, body)
		}
	}
	_, list := a.do(t, http.MethodGet, "/v1/volumes", "", a.mgmt)
	var vols []*structs.Volume
	if err := json.Unmarshal([]byte(list), &vols); err != nil {
		t.Fatalf("volume list: %v: %s", err, list)
	}
	for _, v := range vols {
		if v.ID != "vol1" && v.ID != "prod-vol" {
			t.Errorf("a refused look-alike was registered: %q/%q", v.Namespace, v.ID)
		}
	}

	// (e) A token scoped to one namespace sees no other namespace's
	// volumes, events, served volumes or metrics.
	code, body := a.do(t, http.MethodPut, "/v1/volumes", `{"volumes":[{"id":"prod-vol","namespace":"prod","external_id":"projects/demo/zones/us-central1-a/disks/prod-vol","plugin_id":"gce-pd","access_mode":"single-node-writer","attachment_mode":"file-system"}]}`, a.mgmt)
	if code != http.StatusOK {
		t.Fatalf("register prod-vol: %d %s", code, body)
	}
	scoped := a.token("default-reader", "events { policy = \"read\" }\nmodules { policy = \"read\" }\nnamespace \"default\" { policy = \"read\" }\n")
	if code, body := a.do(t, http.MethodGet, "/v1/volumes?namespace=prod", "", scoped); code != http.StatusForbidden {
		t.Errorf("scoped token lists prod: %d %s", code, body)
	}
	if code, body := a.do(t, http.MethodGet, "/v1/metrics", "", scoped); code != http.StatusForbidden {
		t.Errorf("scoped token reads the metrics: %d %s, want 403 (operator:read)", code, body)
	}
	code, body = a.do(t, http.MethodGet, "/v1/events", "", scoped)
	if code != http.StatusOK {
		t.Fatalf("scoped events: %d %s", code, body)
	}
	var evs []*structs.Event
	if err := json.Unmarshal([]byte(body), &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Namespace == "prod" || strings.Contains(e.Message, "prod-vol") || e.Type == structs.EventAudit {
			t.Errorf("scoped token sees event %s %q", e.Type, e.Message)
		}
	}
	t.Logf("attacks refused: node fields, look-alike IDs; the default-scoped token saw %d events, none of prod", len(evs))
	// The management token does see prod's registration happen: the
	// filter, not an empty table, hid it.
	if code, body := a.do(t, http.MethodGet, "/v1/volume/prod-vol?namespace=prod", "", a.mgmt); code != http.StatusOK {
		t.Errorf("management reads prod-vol: %d %s", code, body)
	}
	if code, body := a.do(t, http.MethodDelete, "/v1/volume/prod-vol?namespace=prod", "", a.mgmt); code != http.StatusOK {
		t.Errorf("deregister prod-vol: %d %s", code, body)
	}

	// (f) A token that reads nodes and one namespace reads no other
	// namespace's allocations: the list across namespaces and prod's are
	// 403, and a prod allocation by ID answers exactly as an ID that does
	// not exist.
	if code, body := a.do(t, http.MethodPut, "/v1/allocs", `{"allocs":[{"id":"prod-job-1","namespace":"prod","node_id":"node1","client_status":"running"}]}`, a.mgmt); code != http.StatusOK {
		t.Fatalf("register prod-job-1: %d %s", code, body)
	}
	reader := a.token("default-node-reader", "node { policy = \"read\" }\nnamespace \"default\" { policy = \"read\" }\n")
	for _, path := range []string{"/v1/allocs", "/v1/allocs?node_id=node1", "/v1/allocs?namespace=prod", "/v1/alloc/prod-job-1", "/v1/alloc/prod-job-1?namespace=prod"} {
		if code, body := a.do(t, http.MethodGet, path, "", reader); code != http.StatusForbidden || strings.Contains(body, "prod-job-1") {
			t.Errorf("GET %s with a default reader: %d %s, want 403 showing nothing", path, code, body)
		}
	}
	_, prodAlloc := a.do(t, http.MethodGet, "/v1/alloc/prod-job-1", "", reader)
	_, missing := a.do(t, http.MethodGet, "/v1/alloc/no-such-alloc", "", reader)
	if prodAlloc != missing {
		t.Errorf("a prod allocation and a missing one answer apart:\n%s\n%s", prodAlloc, missing)
	}
	if code, body := a.do(t, http.MethodGet, "/v1/allocs?namespace=default", "", reader); code != http.StatusOK || strings.Contains(body, "prod-job-1") {
		t.Errorf("default's allocations: %d %s", code, body)
	}
	if code, body := a.do(t, http.MethodGet, "/v1/alloc/prod-job-1", "", a.mgmt); code != http.StatusOK {
		t.Errorf("management reads prod-job-1: %d %s", code, body)
	}
}
