package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/server"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// racingClusterLog runs between(nodeID) once per node, before forwarding
// the first NodeUpsert of that node: a write committed after the API's
// checkNodeRegistration read the node and before the registration commits.
type racingClusterLog struct {
	*cluster.Cluster
	mu      sync.Mutex
	done    map[string]bool
	between func(nodeID string)
}

func (l *racingClusterLog) Apply(ctx context.Context, t structs.MessageType, req any) (uint64, any, error) {
	if r, ok := req.(*structs.NodeUpsertRequest); ok && t == structs.NodeUpsertType && r.Node != nil {
		l.mu.Lock()
		first := !l.done[r.Node.ID]
		l.done[r.Node.ID] = true
		l.mu.Unlock()
		if first {
			l.between(r.Node.ID)
		}
	}
	return l.Cluster.Apply(ctx, t, req)
}

// With ACLs on, the anonymous policy grants node_id "n1" write (and no
// operator:write). The API checks the registration against the node as
// it stands; an operator's direct-mode registration of n1 that commits
// after that check is not replaced by the anonymous caller's (its
// endpoint and root_dir kept, 403): the store judges the anonymous
// policy at commit as it judges a token's, which the same race with a
// node token (n2) shows. Before, the request carried no accessor and
// the store judged nothing.
func TestAttackAnonymousRegistrationReplacesOperatorsNodeInRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := state.NewStore()
	c, err := cluster.New(cluster.Config{Dev: true, NodeID: "s1", Logger: hclog.NewNullLogger()}, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	if err := c.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	operatorNode := func(id string) *structs.Node {
		return &structs.Node{ID: id, Status: structs.NodeReady, RootDir: "/var/lib/op/" + id, RegisteredBy: "",
			Plugins: map[string]*structs.NodePlugin{"p": {PluginID: "p", Endpoint: "unix:///run/op-" + id + ".sock", ExternalNodeID: "ext-" + id}}}
	}
	rl := &racingClusterLog{Cluster: c, done: map[string]bool{}}
	rl.between = func(id string) {
		if _, _, err := c.Apply(ctx, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: operatorNode(id)}); err != nil {
			t.Errorf("operator registers %s: %v", id, err)
		}
	}
	cc := csi.New(csi.Config{CallTimeout: 5 * time.Second})
	t.Cleanup(func() { cc.Close() })
	srv := server.New(server.Config{Store: st, Log: rl, CSI: cc})
	svc := acl.NewService(st, c, nil)
	boot, _, err := svc.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Apply(ctx, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p"}}); err != nil {
		t.Fatal(err)
	}
	for name, rules := range map[string]string{structs.AnonymousPolicy: `node_id "n1" { policy = "write" }`, "n2": `node_id "n2" { policy = "write" }`} {
		if _, err := svc.UpsertPolicy(ctx, boot.AccessorID, &structs.ACLPolicy{Name: name, Rules: rules}); err != nil {
			t.Fatal(err)
		}
	}
	_, n2Secret, err := svc.CreateToken(ctx, boot.AccessorID, acl.NewToken{Name: "n2", Policies: []string{"n2"}})
	if err != nil {
		t.Fatal(err)
	}
	a := api.New(api.Config{}, api.StateStore(st), srv, nil)
	a.EnableACL(api.ACLConfig{Service: svc, Audit: c})
	ts := httptest.NewServer(a.Handler())
	t.Cleanup(ts.Close)

	check := func(id string, hdr ...string) {
		resp, out := do(t, http.MethodPut, ts.URL+"/v1/nodes", `{"node":{"id":"`+id+`"}}`, hdr...)
		n, err := st.Snapshot().NodeByID(nil, id)
		if err != nil || n == nil {
			t.Fatalf("%s: %+v %v", id, n, err)
		}
		if resp.StatusCode != http.StatusForbidden || n.RootDir == "" || n.Plugins["p"] == nil || n.Plugins["p"].Endpoint == "" {
			t.Errorf("%s: a caller without operator:write replaced the operator's direct node (answer %d %s): stored root_dir=%q plugins=%v",
				id, resp.StatusCode, out, n.RootDir, n.Plugins)
		}
	}
	check("n2", api.TokenHeader, n2Secret) // control: refused at commit
	check("n1")                            // anonymous
}
