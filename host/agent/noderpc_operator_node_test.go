package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	nodeagent "github.com/volhost/volhost/host/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/host/tlsutil"
)

// TestNodeTokenCannotTakeOverAnOperatorsNodeOverNodeRPC: an operator
// registers n1 in direct mode (its plugin endpoint, which the leader
// dials, and its root_dir). With n1's node token (node_id "n1" write),
// replacing that node is refused on the API (403: "the node holds an
// operator's plugins.csi.endpoint, root_dir; replacing it here would drop
// them"), and so is the same token's hello on the node RPC, with n1's
// node certificate. Before, the hello replaced the node whole: the mode,
// the endpoint and the root_dir, an operator's decisions, became the
// token's, and the leader sent n1's node steps (NodeStage and NodePublish,
// with the volumes' secrets) down its stream instead of to the operator's
// endpoint. (A helper's attack by role found it.) Judged by the store's
// node after the hello was answered.
func TestNodeTokenCannotTakeOverAnOperatorsNodeOverNodeRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := newPKI(t)
	a, mgmt := startSecureNodeServer(ctx, t, p)
	defer a.Shutdown()
	boot, err := a.ACL.Resolve(mgmt)
	if err != nil {
		t.Fatal(err)
	}

	// The operator's direct node.
	opDrv := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	if _, err := a.Server.RegisterPlugin(ctx, &structs.Plugin{ID: "csi"}); err != nil {
		t.Fatal(err)
	}
	opRoot := t.TempDir()
	if _, err := a.Server.RegisterNode(ctx, &structs.Node{ID: "n1", RootDir: opRoot,
		Plugins: map[string]*structs.NodePlugin{"csi": {Endpoint: opDrv.Endpoint()}}}); err != nil {
		t.Fatal(err)
	}
	before, _ := a.Store.Snapshot().NodeByID(nil, "n1")

	// n1's node token.
	if _, err := a.ACL.UpsertPolicy(ctx, boot.Accessor(), &structs.ACLPolicy{Name: "n1", Rules: `node_id "n1" { policy = "write" }`}); err != nil {
		t.Fatal(err)
	}
	_, nodeSecret, err := a.ACL.CreateToken(ctx, boot.Accessor(), acl.NewToken{Name: "n1", Policies: []string{"n1"}})
	if err != nil {
		t.Fatal(err)
	}

	// On the API the replacement is refused.
	req := httptest.NewRequest(http.MethodPut, "/v1/nodes", strings.NewReader(`{"node":{"id":"n1","plugins":{"csi":{}}}}`))
	req.Host = "127.0.0.1"
	req.Header.Set(api.TokenHeader, nodeSecret)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	a.API.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("PUT /v1/nodes over the operator's node with n1's token: %d %s, want 403", rec.Code, rec.Body)
	}

	// On the node RPC: a hello with the same token and n1's certificate.
	evil := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1"})
	cert := p.holder(t, tlsutil.CertRequest{Kind: tlsutil.KindClient, Node: "n1"}, "n1")
	clk := clockwork.NewFakeClock()
	na, _ := runNodeAgent(ctx, t, nodeagent.Config{Servers: []string{a.NodeRPC.Addr()}, NodeID: "n1", RootDir: t.TempDir(),
		Plugins: map[string]string{"csi": evil.Endpoint()}, Token: nodeSecret, Clock: clk, TLS: cert.ClientConfig()})
	// The agent waits on its clock once its hello was answered: refused,
	// before its retry; welcomed, for its heartbeat (the registration
	// committed before either).
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := clk.BlockUntilContext(wctx, 1); err != nil {
		t.Fatalf("the agent's hello was never answered: %v", err)
	}
	connected := na.Connected() != ""

	after, _ := a.Store.Snapshot().NodeByID(nil, "n1")
	var changed []string
	if after.Agent != before.Agent {
		changed = append(changed, "agent (direct -> agent mode)")
	}
	if after.RootDir != before.RootDir {
		changed = append(changed, "root_dir "+before.RootDir+" -> "+after.RootDir)
	}
	if np := after.Plugins["csi"]; np == nil || np.Endpoint != before.Plugins["csi"].Endpoint {
		changed = append(changed, "plugins.csi.endpoint (the operator's dropped)")
	}
	if len(changed) > 0 {
		t.Errorf("n1's node token (connected %v) replaced the operator's direct node over the node RPC, which the API refuses it: %s",
			connected, strings.Join(changed, "; "))
	}
}
