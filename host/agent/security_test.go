package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/api"
)

func httpDo(t *testing.T, hc *http.Client, method, url, body, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json") // the API refuses other writes
	}
	if token != "" {
		req.Header.Set(api.TokenHeader, token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func peerCount(t *testing.T, a *Agent) int {
	t.Helper()
	peers, err := a.Cluster.Peers()
	if err != nil {
		t.Fatal(err)
	}
	return len(peers)
}

// TestJoinAttackRefused reproduces an attack on `agent -dev`: an
// anonymous join carrying the cluster ID from the configuration added a
// fake voter and every write then answered 503 for good. With ACLs it is
// 403 (the configuration is not even readable); with a management token,
// or with ACLs off, the join of a server that cannot answer is refused
// with a clear error. The peer set never changes and writes keep working.
func TestJoinAttackRefused(t *testing.T) {
	for _, aclOn := range []bool{true, false} {
		name := map[bool]string{true: "acl", false: "no-acl"}[aclOn]
		t.Run(name, func(t *testing.T) {
			cfg := localConfig()
			cfg.ACL.Enabled = aclOn
			a, _ := startAgent(t, cfg, Options{Logger: hclog.NewNullLogger()})
			t.Cleanup(func() { _ = a.Shutdown() })
			base := "http://" + a.HTTPAddr()
			hc := http.DefaultClient

			code, out := httpDo(t, hc, "GET", base+"/v1/operator/raft/configuration", "", "")
			if aclOn && code != http.StatusForbidden {
				t.Fatalf("anonymous configuration read: %d %s, want 403", code, out)
			}
			join := `{"id":"evil","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2","cluster_id":"` + a.Cluster.ID() + `","version":1}`
			var mgmt string
			if aclOn {
				code, out = httpDo(t, hc, "POST", base+"/v1/operator/raft/join", join, "")
				if code != http.StatusForbidden || !strings.Contains(out, "Permission denied") {
					t.Fatalf("anonymous join: %d %s, want 403 Permission denied", code, out)
				}
				if n := peerCount(t, a); n != 1 {
					t.Fatalf("anonymous join changed the peer set: %d peers", n)
				}
				code, out = httpDo(t, hc, "POST", base+"/v1/acl/bootstrap", "", "")
				var boot api.ACLTokenSecret
				if code != http.StatusOK || json.Unmarshal([]byte(out), &boot) != nil {
					t.Fatalf("bootstrap: %d %s", code, out)
				}
				mgmt = boot.SecretID
			}
			code, out = httpDo(t, hc, "POST", base+"/v1/operator/raft/join", join, mgmt)
			if code != http.StatusConflict || !strings.Contains(out, "without quorum") {
				t.Fatalf("join of a server that cannot answer: %d %s, want 409 naming the quorum", code, out)
			}
			if n := peerCount(t, a); n != 1 {
				t.Fatalf("refused join changed the peer set: %d peers", n)
			}
			code, out = httpDo(t, hc, "PUT", base+"/v1/system/gc", "", mgmt)
			if code != http.StatusOK {
				t.Fatalf("write after the refused join: %d %s", code, out)
			}
			code, out = httpDo(t, hc, "DELETE", base+"/v1/operator/raft/peer?id="+a.Cluster.NodeID(), "", mgmt)
			if code != http.StatusConflict || !strings.Contains(out, "last voter") {
				t.Fatalf("removing the last voter: %d %s, want 409", code, out)
			}
		})
	}
}
