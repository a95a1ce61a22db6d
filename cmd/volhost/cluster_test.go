package main

// The multi-server end-to-end test: the real binary, three
// `volhost agent -server` processes on loopback, SIGKILL of the leader.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/agent"
	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

type serverProc struct {
	id   string
	http string
	raft string
	cmd  *exec.Cmd
	log  string
	dead bool
}

// startServer runs one agent process; its output goes to a log file that
// is printed if the test fails.
func startServer(t *testing.T, bin, dir, id string, httpPort, raftPort int, extra ...string) *serverProc {
	t.Helper()
	p := &serverProc{id: id, http: fmt.Sprintf("127.0.0.1:%d", httpPort), raft: fmt.Sprintf("127.0.0.1:%d", raftPort), log: filepath.Join(dir, id+".log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"agent", "-server", "-node-id", id,
		"-data-dir", filepath.Join(dir, id),
		"-bind", fmt.Sprintf("127.0.0.1:%d", raftPort),
		"-http-addr", p.http, "-log-level", "info"}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.dead {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-done
			}
		}
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("--- %s log ---\n%s", id, b)
		}
	})
	return p
}

// cliLeader asks the server at addr, through the CLI, who leads.
func cliLeader(t *testing.T, addr string) (string, int) {
	e := &cliEnv{t: t, addr: "http://" + addr}
	r := e.run("operator", "raft", "list-peers", "-json")
	if r.code != 0 {
		return "", 0
	}
	var out api.RaftConfigurationResponse
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("list-peers -json: %v\n%s", err, r.stdout)
	}
	for _, s := range out.Servers {
		if s.Leader {
			return s.ID, len(out.Servers)
		}
	}
	return "", len(out.Servers)
}

// Three real agent processes on loopback; SIGKILL the leader; the CLI sees
// a new leader and releases continue through it.
func TestClusterBinaryFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three agent processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "volhost")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})

	ports := freePorts(t, 6)
	seed := fmt.Sprintf("127.0.0.1:%d", ports[0])
	procs := map[string]*serverProc{
		"s1": startServer(t, bin, dir, "s1", ports[0], ports[3], "-bootstrap-expect", "3"),
		"s2": startServer(t, bin, dir, "s2", ports[1], ports[4], "-join", seed),
		"s3": startServer(t, bin, dir, "s3", ports[2], ports[5], "-join", seed),
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := waitFor(t, ctx, "a leader of three servers", func() (string, bool) {
		id, n := cliLeader(t, procs["s2"].http)
		return id, id != "" && n == 3
	})
	t.Logf("first leader: %s", leader)

	// Set up through a follower: writes are forwarded to the leader.
	var follower *serverProc
	for id, p := range procs {
		if id != leader {
			follower = p
		}
	}
	cl, err := client.New("http://"+follower.http, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the follower to know the leader's address", func() (struct{}, bool) {
		_, _, err := cl.Volumes(ctx, "", "", nil)
		return struct{}{}, err == nil
	})
	if _, err := cl.RegisterPlugin(ctx, &structs.Plugin{ID: "csi", ControllerEndpoint: drv.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.RegisterNode(ctx, &structs.Node{ID: "node1", RootDir: t.TempDir(),
		Plugins: map[string]*structs.NodePlugin{"csi": {Endpoint: drv.Endpoint()}}}); err != nil {
		t.Fatal(err)
	}
	const n = 4
	for i := range n {
		if _, err := cl.RegisterVolumes(ctx, []*structs.Volume{{ID: fmt.Sprintf("vol-%d", i), ExternalID: fmt.Sprintf("disk-%d", i),
			PluginID: "csi", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.UpsertAllocs(ctx, []*structs.Alloc{{ID: fmt.Sprintf("web-%d", i), NodeID: "node1", ClientStatus: structs.AllocRunning}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.ClaimVolume(ctx, &structs.ClaimRequest{VolumeID: fmt.Sprintf("vol-%d", i),
			AllocID: fmt.Sprintf("web-%d", i), NodeID: "node1", Mode: structs.ClaimWrite}); err != nil {
			t.Fatal(err)
		}
	}
	release := func(c *client.Client, i int) {
		t.Helper()
		if _, err := c.UpsertAllocs(ctx, []*structs.Alloc{{ID: fmt.Sprintf("web-%d", i), NodeID: "node1", ClientStatus: structs.AllocComplete}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, fmt.Sprintf("vol-%d released", i), func() (struct{}, bool) {
			v, _, err := c.Volume(ctx, "default", fmt.Sprintf("vol-%d", i), nil)
			return struct{}{}, err == nil && len(v.Claims) == 0
		})
	}
	release(cl, 0)

	// SIGKILL the leader: no goodbye, no cancelled calls.
	lp := procs[leader]
	killed := time.Now()
	if err := lp.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = lp.cmd.Wait()
	lp.dead = true

	var survivor *serverProc
	for id, p := range procs {
		if id != leader {
			survivor = p
		}
	}
	newLeader := waitFor(t, ctx, "a new leader", func() (string, bool) {
		id, _ := cliLeader(t, survivor.http)
		return id, id != "" && id != leader
	})
	t.Logf("new leader %s elected %v after the kill", newLeader, time.Since(killed).Round(time.Millisecond))

	// The built binary's own CLI agrees.
	out, err := exec.Command(bin, "operator", "raft", "list-peers", "-address", "http://"+survivor.http).CombinedOutput()
	if err != nil || !strings.Contains(string(out), newLeader) || !strings.Contains(string(out), "leader") {
		t.Fatalf("volhost operator raft list-peers: %v\n%s", err, out)
	}

	// Releases continue through the new leader.
	sc, err := client.New("http://"+survivor.http, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		release(sc, i)
		if i == 1 {
			t.Logf("first release completed by the new leader %v after the kill", time.Since(killed).Round(time.Millisecond))
		}
	}
	for i := range n {
		if drv.Attached(fmt.Sprintf("disk-%d", i), "ext-node1") {
			t.Errorf("disk-%d still attached", i)
		}
	}
}

// devAgent runs an in-memory agent for a test and returns it.
func devAgent(t *testing.T) *agent.Agent {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.Dev = true
	cfg.HTTP.Address = "127.0.0.1:0"
	a, err := agent.New(cfg, agent.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown() })
	if err := a.Cluster.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// `operator snapshot save` on one cluster and `restore` into a fresh one
// round-trip the whole state (equal digests); a bad file changes nothing.
func TestOperatorSnapshotSaveRestore(t *testing.T) {
	src, dst := devAgent(t), devAgent(t)
	se := &cliEnv{t: t, addr: "http://" + src.HTTPAddr()}
	de := &cliEnv{t: t, addr: "http://" + dst.HTTPAddr()}
	sc, err := client.New(se.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"n1", "n2"} {
		if _, err := sc.RegisterNode(ctx, &structs.Node{ID: id, Status: structs.NodeReady}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sc.UpsertAllocs(ctx, []*structs.Alloc{{ID: "a1", NodeID: "n1", ClientStatus: structs.AllocRunning}}); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "state.snap")
	if out := se.ok("operator", "snapshot", "save", file); !strings.Contains(out, "Saved snapshot") {
		t.Fatalf("save: %s", out)
	}
	// The save and the restore are audited (ACLs on or off), after the
	// snapshot is taken and after it is restored: the states compare
	// without the audit trail.
	want := digestWithoutAudit(t, src.Store)
	before, _ := dst.Store.Digest()

	bad := filepath.Join(t.TempDir(), "bad.snap")
	if err := os.WriteFile(bad, []byte("not a snapshot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad file", []string{"operator", "snapshot", "restore", bad}, "snapshot"},
		{"missing file", []string{"operator", "snapshot", "restore", bad + ".none"}, "reading the snapshot"},
		{"no file", []string{"operator", "snapshot", "restore"}, "not enough arguments"},
		{"foreign cluster", []string{"operator", "snapshot", "restore", file}, "another cluster"},
	}
	for _, tc := range tests {
		r := de.run(tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("%s: exit %d, stderr %q", tc.name, r.code, r.stderr)
		}
		if got, _ := dst.Store.Digest(); got != before {
			t.Fatalf("%s: state changed", tc.name)
		}
	}

	if out := de.ok("operator", "snapshot", "restore", "-force-foreign", file); !strings.Contains(out, "Restored snapshot") {
		t.Fatalf("restore: %s", out)
	}
	if got := digestWithoutAudit(t, dst.Store); got != want {
		t.Fatalf("digest after restore %s, want %s", got, want)
	}
	// The restored server keeps taking writes and keeps its own identity.
	de.ok("node", "set-status", "n2", "down")
	if dst.Cluster.ID() == src.Cluster.ID() {
		t.Fatal("restore copied the source cluster's ID")
	}
	if out := de.ok("operator", "raft", "list-peers"); !strings.Contains(out, "leader") {
		t.Fatalf("list-peers: %s", out)
	}
}

// digestWithoutAudit is the store's digest without its audit events and
// the events table's index, which they move.
func digestWithoutAudit(t *testing.T, st *state.Store) string {
	t.Helper()
	var b bytes.Buffer
	if err := st.Persist(&b); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if strings.HasPrefix(line, `{"t":"index","r":{"key":"events",`) ||
			(strings.HasPrefix(line, `{"t":"events",`) && strings.Contains(line, `"type":"audit"`)) {
			continue
		}
		h.Write([]byte(line))
	}
	return hex.EncodeToString(h.Sum(nil))
}
