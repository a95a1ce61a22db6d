package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/structs"
)

// fakeOp is a scripted cluster view.
type fakeOp struct {
	id          string
	leader      bool
	leaderAddr  string // "" : no known leader
	lastContact time.Duration

	mu       sync.Mutex
	joins    []cluster.JoinRequest
	restored []byte
}

func (f *fakeOp) NodeID() string             { return f.id }
func (f *fakeOp) ID() string                 { return "cluster-1" }
func (f *fakeOp) IsLeader() bool             { return f.leader }
func (f *fakeOp) KnownLeader() bool          { return f.leader || f.leaderAddr != "" }
func (f *fakeOp) LastContact() time.Duration { return f.lastContact }
func (f *fakeOp) LeaderHTTPAddr() (string, error) {
	if f.leaderAddr == "" {
		return "", structs.ErrNoLeader
	}
	return f.leaderAddr, nil
}
func (f *fakeOp) Peers() ([]cluster.Peer, error) {
	return []cluster.Peer{{ID: "s1", RaftAddr: "r1", HTTPAddr: "h1", Leader: true, Voter: true}, {ID: f.id, RaftAddr: "r-" + f.id, Voter: true}}, nil
}
func (f *fakeOp) Join(_ context.Context, req cluster.JoinRequest) (cluster.JoinResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joins = append(f.joins, req)
	if req.ClusterID == "other" {
		return cluster.JoinResponse{}, errors.Join(cluster.ErrJoinRefused, structs.ErrConflict)
	}
	return cluster.JoinResponse{Pending: !f.leader, ClusterID: "cluster-1"}, nil
}
func (f *fakeOp) RemovePeer(_ context.Context, id string) error {
	if id != "s2" {
		return structs.NotFound("raft peer", id)
	}
	return nil
}
func (f *fakeOp) TransferLeadership(context.Context, string) error { return nil }
func (f *fakeOp) SaveSnapshot(_ context.Context, w io.Writer) error {
	_, err := io.WriteString(w, "snapshot-of-"+f.id)
	return err
}
func (f *fakeOp) RotateKey(context.Context) (cluster.KeyInfo, error) {
	return cluster.KeyInfo{ID: "k2", Active: true}, nil
}
func (f *fakeOp) Keyring() []cluster.KeyInfo { return []cluster.KeyInfo{{ID: "k1", Active: true}} }
func (f *fakeOp) RestoreSnapshot(_ context.Context, r io.Reader, _ cluster.RestoreOptions) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return structs.Invalid("snapshot", "empty")
	}
	f.mu.Lock()
	f.restored = b
	f.mu.Unlock()
	return nil
}

type member struct {
	op *fakeOp
	b  *apitest.StoreBackend
	ts *httptest.Server
}

func serveMember(t *testing.T, op *fakeOp) *member {
	t.Helper()
	b := apitest.NewStoreBackend()
	s := api.NewServer(api.Config{}, b.Store, b, nil)
	s.EnableCluster(op)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &member{op: op, b: b, ts: ts}
}

func do(t *testing.T, method, url string, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	setTestContentType(req, body != "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestForwarding(t *testing.T) {
	leader := serveMember(t, &fakeOp{id: "s1", leader: true})
	leaderHost := strings.TrimPrefix(leader.ts.URL, "http://")
	follower := serveMember(t, &fakeOp{id: "s2", leaderAddr: leaderHost, lastContact: 1234 * time.Millisecond})
	orphan := serveMember(t, &fakeOp{id: "s3", lastContact: -1})
	cut := serveMember(t, &fakeOp{id: "s4", leaderAddr: deadAddr(t)})

	node := `{"node": {"id": "n1", "status": "ready"}}`
	tests := []struct {
		name        string
		srv         *member
		method, url string
		body        string
		hdr         []string
		status      int
		knownLeader string // "" : header not checked
		lastContact string
		contains    string
	}{
		{"write on the leader", leader, "PUT", "/v1/nodes", node, nil, 200, "", "", `"id": "n1"`},
		{"write on a follower is forwarded", follower, "PUT", "/v1/nodes", `{"node": {"id": "n2", "status": "ready"}}`, nil, 200, "", "", `"id": "n2"`},
		{"default read on a follower is the leader's", follower, "GET", "/v1/nodes", "", nil, 200, "true", "0", `"n2"`},
		{"stale read on a follower is local", follower, "GET", "/v1/nodes?stale=true", "", nil, 200, "true", "1234", "[]"},
		{"bad stale flag", follower, "GET", "/v1/nodes?stale=maybe", "", nil, 400, "", "", "stale"},
		{"write without a leader fails fast", orphan, "PUT", "/v1/nodes", node, nil, 503, "", "", "no cluster leader"},
		{"default read without a leader", orphan, "GET", "/v1/nodes", "", nil, 503, "", "", "no cluster leader"},
		{"stale read without a leader says so", orphan, "GET", "/v1/nodes?stale=true", "", nil, 200, "false", "-1", "[]"},
		{"unreachable leader", cut, "PUT", "/v1/nodes", node, nil, 503, "", "", "forwarding to the leader"},
		{"never forwarded twice", follower, "PUT", "/v1/nodes", node, []string{api.ForwardedHeader, "s9"}, 503, "", "", "forwarded by s9"},
		{"peers are local", orphan, "GET", "/v1/status/peers", "", nil, 200, "false", "-1", `"r-s3"`},
		{"join on a leaderless seed is local", orphan, "POST", "/v1/operator/raft/join", `{"id": "s5", "raft_addr": "r5", "version": 1}`, nil, 202, "", "", `"pending": true`},
		{"join on a follower goes to the leader", follower, "POST", "/v1/operator/raft/join", `{"id": "s6", "raft_addr": "r6", "version": 1}`, nil, 200, "", "", `"pending": false`},
		{"join refused", leader, "POST", "/v1/operator/raft/join", `{"id": "s7", "raft_addr": "r7", "cluster_id": "other", "version": 1}`, nil, 409, "", "", "join refused"},
		{"join with an unknown field", leader, "POST", "/v1/operator/raft/join", `{"idx": "s7"}`, nil, 400, "", "", "idx"},
		{"remove peer", follower, "DELETE", "/v1/operator/raft/peer?id=s2", "", nil, 200, "", "", `"removed": "s2"`},
		{"remove unknown peer", leader, "DELETE", "/v1/operator/raft/peer?id=s8", "", nil, 404, "", "", "s8"},
		{"remove peer without id", leader, "DELETE", "/v1/operator/raft/peer", "", nil, 400, "", "", "id"},
		{"configuration from the leader", follower, "GET", "/v1/operator/raft/configuration", "", nil, 200, "true", "0", `"cluster_id": "cluster-1"`},
		{"snapshot from the leader", follower, "GET", "/v1/operator/snapshot", "", nil, 200, "true", "0", "snapshot-of-s1"},
		{"snapshot restore goes to the leader", follower, "PUT", "/v1/operator/snapshot", "state-bytes", nil, 200, "", "", `"restored": true`},
		{"empty snapshot restore", leader, "PUT", "/v1/operator/snapshot", "", nil, 400, "", "", "snapshot"},
		{"snapshot upload as JSON (CSRF shape)", leader, "PUT", "/v1/operator/snapshot", "state-bytes", []string{"Content-Type", "text/plain"}, 415, "", "", "application/octet-stream"},
		{"snapshot upload from a foreign page", follower, "PUT", "/v1/operator/snapshot", "state-bytes", []string{"Origin", "https://evil.example"}, 403, "", "", "cross-origin"},
		{"keyring list", follower, "GET", "/v1/operator/keyring", "", nil, 200, "", "", `"id": "k1"`},
		{"keyring rotate goes to the leader", follower, "PUT", "/v1/operator/keyring/rotate", "", nil, 200, "", "", `"id": "k2"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, tc.method, tc.srv.ts.URL+tc.url, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.contains) {
				t.Fatalf("%d %s, want %d containing %q", resp.StatusCode, body, tc.status, tc.contains)
			}
			if tc.knownLeader != "" {
				if got := resp.Header.Get(api.KnownLeaderHeader); got != tc.knownLeader {
					t.Fatalf("%s = %q, want %q", api.KnownLeaderHeader, got, tc.knownLeader)
				}
				if got := resp.Header.Get(api.LastContactHeader); got != tc.lastContact {
					t.Fatalf("%s = %q, want %q", api.LastContactHeader, got, tc.lastContact)
				}
			}
		})
	}
	// Forwarded writes landed on the leader only.
	if n, _ := follower.b.Store.Snapshot().NodeByID(nil, "n2"); n != nil {
		t.Fatal("forwarded write applied on the follower")
	}
	if n, _ := leader.b.Store.Snapshot().NodeByID(nil, "n2"); n == nil {
		t.Fatal("forwarded write missing on the leader")
	}
	if !bytes.Equal(leader.op.restored, []byte("state-bytes")) {
		t.Fatalf("leader restored %q", leader.op.restored)
	}
	var joins []string
	for _, j := range leader.op.joins {
		joins = append(joins, j.ID)
	}
	if strings.Join(joins, ",") != "s6,s7" {
		t.Fatalf("joins reaching the leader: %v", joins)
	}
}

// A blocking query on a follower with ?stale=true waits on the follower's
// own store and answers when it changes.
func TestStaleBlockingQueryOnFollower(t *testing.T) {
	follower := serveMember(t, &fakeOp{id: "s2", leaderAddr: deadAddr(t), lastContact: 5 * time.Millisecond})
	if _, err := follower.b.RegisterNode(context.Background(), &structs.Node{ID: "n0", Status: structs.NodeReady}); err != nil {
		t.Fatal(err)
	}
	resp, _ := do(t, "GET", follower.ts.URL+"/v1/nodes?stale=true", "")
	idx := resp.Header.Get(api.IndexHeader)
	done := make(chan string, 1)
	go func() {
		resp, err := http.Get(follower.ts.URL + "/v1/nodes?stale=true&wait=30s&index=" + idx)
		if err != nil {
			done <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- string(b)
	}()
	// Replication reaching the follower's store wakes the query.
	if _, err := follower.b.RegisterNode(context.Background(), &structs.Node{ID: "n1", Status: structs.NodeReady}); err != nil {
		t.Fatal(err)
	}
	select {
	case body := <-done:
		var nodes []structs.Node
		if err := json.Unmarshal([]byte(body), &nodes); err != nil || len(nodes) != 2 {
			t.Fatalf("blocking answer %s: %v", body, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("blocking query never answered")
	}
}
