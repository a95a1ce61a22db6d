package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// raftConfiguration is GET /v1/operator/raft/configuration as the upgrade
// test reads it (a server older than the gates answers no builds and no
// features).
type raftConfiguration struct {
	Servers         []raftPeer `json:"servers"`
	EnabledFeatures []string   `json:"enabled_features"`
}

type raftPeer struct {
	ID       string   `json:"id"`
	Leader   bool     `json:"leader"`
	Build    string   `json:"build"`
	Features []string `json:"features"`
}

func (a *API) raftConfiguration(ctx context.Context) (raftConfiguration, error) {
	var c raftConfiguration
	_, err := a.do(ctx, http.MethodGet, "/v1/operator/raft/configuration", nil, &c)
	return c, err
}

// snapshotHeaderVersion reads the cluster header version of a raft
// snapshot's state file (its first line).
func snapshotHeaderVersion(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil {
		return 0, err
	}
	var h struct {
		Version int `json:"volhost_cluster"`
	}
	err = json.Unmarshal(line, &h)
	return h.Version, err
}

// claimWindow is one claim's life as the test saw it: granted (the
// claim's answer) until its allocation was marked complete. No detach,
// unstage or unpublish of its disk may reach the driver in between.
type claimWindow struct {
	disk, alloc      string
	granted, release time.Time
}

// TestUpgradeRolling (RELIABILITY.md, README "Upgrading a cluster"): three
// servers of the previous release (.release/previous, built from a git
// worktree of that commit and cached) with two node agents, under a
// steady claim/release load against the GCE PD driver, are upgraded one
// server at a time while releases are in flight; one upgraded server is
// rolled back to the previous release while the gate holds, then upgraded
// again; the last one is stopped so a new leader takes claims while an
// old server is still in the configuration; the node agents go last. Checked: no claim lost (every
// granted claim is in the store and attached at the driver), every claim
// removed exactly once, no detach, unstage or unpublish of a disk at the
// driver while its claim was live, no overlapping ControllerUnpublish,
// nothing attached or staged at the end (the driver's state and log), the
// gated features enabled only once the last server runs the new binary
// (and the write-ahead claim path in use only from then), the previous
// release refusing, with a clear error, a data dir whose snapshot it cannot
// read, and every server's digest equal at the same command index.
func TestUpgradeRolling(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release from a git worktree (cached under ~/.cache/volhost) and rolls three servers through an upgrade")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	commit, oldBin, err := PreviousRelease(ctx)
	if errors.Is(err, ErrReleaseUnavailable) {
		t.Skipf("cannot build the previous release: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	newBin := bins.Volhost
	t.Logf("previous release %s: %s", commit[:12], oldBin)

	const disks = 6
	nodes := []string{"n1", "n2"}
	dir := t.TempDir()
	drv := startDriver(ctx, t, dir, GCEPDOptions{Nodes: nodes, Disks: disks})

	// Both binaries read the same settings; the new one also takes its
	// snapshot turns every second (a setting the previous release does
	// not know), so the snapshot of the enabled features comes quickly.
	// The log stays under the snapshot threshold: only that snapshot is
	// taken, and without it the previous release would replay the whole
	// log on the upgraded data dir.
	base := defaultWatcher + `
log_level = "debug"
node_rpc {
  heartbeat_interval = "500ms"
  heartbeat_ttl      = "10s"
}
events {
  per_volume = 100000 # every claim's transitions stay, for the exactly-once count
}
`
	oldCfg := filepath.Join(dir, "server.hcl") // StartClusterWith writes it
	newCfg := filepath.Join(dir, "server-new.hcl")
	if err := os.WriteFile(newCfg, []byte(base+"server {\n  raft_snapshot_interval = \"1s\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var rpcAddrs []string
	cl, err := StartClusterWith(ctx, dir, oldBin, 3, base, func(id string, addr func() (string, error)) ([]string, error) {
		rpc, err := addr()
		rpcAddrs = append(rpcAddrs, rpc)
		return []string{"-node-rpc-addr", rpc}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cl)
	start := time.Now()

	cl.CLI(ctx, t, "plugin", "register", writeSpec(t, dir, "plugin.hcl", fmt.Sprintf("plugin \"gcepd\" {\n  controller_endpoint = %q\n}\n", Endpoint(drv.Controller))))

	// Node agents of the previous release: servers are upgraded first.
	quoted := make([]string, len(rpcAddrs))
	for i, a := range rpcAddrs {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	clients := map[string]*Proc{}
	startClient := func(n, bin string) {
		t.Helper()
		p, err := Start(dir, "client-"+n, bin, "agent", "-client", "-config", writeSpec(t, dir, "client-"+n+".hcl", fmt.Sprintf(`
client {
  servers  = [%s]
  node_id  = %q
  root_dir = %q
  plugin "gcepd" {
    socket = %q
  }
}
`, strings.Join(quoted, ", "), n, filepath.Join(dir, "root-"+n), Endpoint(drv.Nodes[n]))))
		if err != nil {
			t.Fatal(err)
		}
		clients[n] = p
	}
	t.Cleanup(func() {
		for n, p := range clients {
			p.Stop(5 * time.Second)
			if t.Failed() {
				t.Logf("client %s log tail:\n%s", n, p.Tail(3000))
			}
		}
	})
	// registered waits until n's agent is connected (its node steps go
	// through it).
	registered := func(n string) {
		t.Helper()
		if err := cl.waitNodeAgent(ctx, n); err != nil {
			t.Fatalf("the node agent did not register %s: %v", n, err)
		}
	}
	for _, n := range nodes {
		startClient(n, oldBin)
	}
	for _, n := range nodes {
		registered(n)
	}
	var vols []VolumeSpec
	ext := map[string]string{} // volume ID -> the driver's volume ID
	for i := 0; i < disks; i++ {
		v := VolumeSpec{ID: fmt.Sprintf("vol%d", i), Namespace: "default", ExternalID: drv.VolumeID(fmt.Sprintf("disk-%d", i)),
			PluginID: "gcepd", AccessMode: "single-node-writer", AttachmentMode: "file-system", FSType: "ext4"}
		vols = append(vols, v)
		ext[v.ID] = v.ExternalID
	}
	if err := cl.Retry(ctx, func(ctx context.Context, a *API) error { return a.RegisterVolumes(ctx, vols) }); err != nil {
		t.Fatal(err)
	}

	// rejoined waits until s answers in a cluster with a leader and, on
	// the new binary under a new leader, until the leader recorded the
	// features s advertised.
	rejoined := func(s *Server) {
		t.Helper()
		err := Poll(ctx, 100*time.Millisecond, func() (bool, error) {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			conf, err := s.API.raftConfiguration(cctx)
			if err != nil || len(conf.Servers) != 3 || !slices.ContainsFunc(conf.Servers, func(p raftPeer) bool { return p.Leader }) {
				return false, nil
			}
			// A leader of the previous release records no builds or
			// features: only a new leader's answer can show them.
			newLeader := false
			for _, p := range conf.Servers {
				for _, o := range cl.Servers {
					if p.Leader && o.ID == p.ID && o.bin == newBin && o.Live() {
						newLeader = true
					}
				}
			}
			if s.bin == oldBin || !newLeader {
				return true, nil
			}
			for _, p := range conf.Servers {
				if p.ID == s.ID {
					return p.Build != "" && len(p.Features) > 0, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("%s did not rejoin: %v\n%s", s.ID, err, s.Tail(3000))
		}
	}
	setBin := func(s *Server, bin string) {
		s.bin = bin
		for i := range s.args {
			if s.args[i] == "-config" {
				s.args[i+1] = oldCfg
				if bin == newBin {
					s.args[i+1] = newCfg
				}
			}
		}
	}
	// enabled reads the enabled features from a server on the new binary.
	enabled := func() []string {
		t.Helper()
		for _, s := range cl.Servers {
			if s.bin != newBin || !s.Live() {
				continue
			}
			conf, err := s.API.raftConfiguration(ctx)
			if err == nil {
				return conf.EnabledFeatures
			}
		}
		return nil
	}

	var windows []claimWindow
	claimRetries := 0
	// round claims every disk (new allocations, half on each node),
	// checks every claim is recorded and attached, then ends the
	// allocations and runs step while their releases are in flight.
	round := func(r int, what string, step func()) {
		t.Helper()
		var allocs []AllocSpec
		for i := 0; i < disks; i++ {
			allocs = append(allocs, AllocSpec{ID: fmt.Sprintf("r%d-a%d", r, i), Namespace: "default", NodeID: nodes[i%len(nodes)], ClientStatus: "running"})
		}
		if err := cl.Retry(ctx, func(ctx context.Context, a *API) error { return a.UpsertAllocs(ctx, allocs) }); err != nil {
			t.Fatal(err)
		}
		granted := make([]time.Time, disks)
		for i, a := range allocs {
			req := ClaimRequest{Namespace: "default", VolumeID: vols[i].ID, AllocID: a.ID, NodeID: a.NodeID, Mode: "write"}
			var last error
			if err := Poll(ctx, 50*time.Millisecond, func() (bool, error) {
				last = cl.Retry(ctx, func(ctx context.Context, api *API) error { return api.Claim(ctx, req) })
				if last != nil {
					claimRetries++
				}
				return last == nil, nil
			}); err != nil {
				t.Fatalf("round %d: claim %s: %v (last: %v)", r, a.ID, err, last)
			}
			granted[i] = time.Now()
		}
		// 0 claims lost: each is recorded taken and its disk attached to
		// its node at the driver.
		for i, a := range allocs {
			var v *Volume
			if err := cl.Retry(ctx, func(ctx context.Context, api *API) (err error) {
				v, _, err = api.Volume(ctx, vols[i].ID, 0, 0)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if c := v.Claims[a.ID]; c == nil {
				t.Errorf("round %d: granted claim %s of %s is not in the store: %+v", r, a.ID, vols[i].ID, v.Claims)
			}
			if on, err := drv.Control.Attached(ctx, fmt.Sprintf("disk-%d", i), a.NodeID); err != nil || !on {
				t.Errorf("round %d: disk-%d not attached to %s under claim %s (%v)", r, i, a.NodeID, a.ID, err)
			}
		}
		released := time.Now()
		for i, a := range allocs {
			windows = append(windows, claimWindow{disk: ext[vols[i].ID], alloc: a.ID, granted: granted[i], release: released})
		}
		for i := range allocs {
			allocs[i].ClientStatus = "complete"
		}
		if err := cl.Retry(ctx, func(ctx context.Context, a *API) error { return a.UpsertAllocs(ctx, allocs) }); err != nil {
			t.Fatal(err)
		}
		if step != nil {
			step()
		}
		for _, v := range vols {
			if err := cl.waitReleased(ctx, v.ID); err != nil {
				t.Fatalf("round %d (%s): %s never released: %v", r, what, v.ID, err)
			}
		}
		t.Logf("round %d: %s; enabled features %v", r, what, enabled())
	}
	gateHeld := func(when string) {
		t.Helper()
		if on := enabled(); len(on) > 0 {
			t.Errorf("%s: features %v enabled while a server runs the previous release", when, on)
		}
	}

	leader, err := cl.WaitLeader(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var followers []*Server
	for _, s := range cl.Servers {
		if s != leader {
			followers = append(followers, s)
		}
	}
	a, b, l := followers[0], followers[1], leader
	upgrade := func(s *Server, bin string) func() {
		return func() {
			s.Stop(20 * time.Second)
			setBin(s, bin)
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
			rejoined(s)
		}
	}
	round(0, "every server on the previous release", nil)
	round(1, "upgrade "+a.ID, upgrade(a, newBin))
	gateHeld("one server upgraded")
	round(2, "upgrade "+b.ID, upgrade(b, newBin))
	gateHeld("two servers upgraded")
	round(3, "roll "+b.ID+" back to the previous release", upgrade(b, oldBin))
	gateHeld("rolled back")
	round(4, "upgrade "+b.ID+" again", upgrade(b, newBin))
	gateHeld("two servers upgraded again")
	// The last old server stops: a new leader takes the next round's
	// claims while the configuration still holds a server without the
	// features (the publish-first path).
	round(5, "stop "+l.ID+" (the last on the previous release)", func() { l.Stop(20 * time.Second) })
	gateHeld("the last old server down")
	round(6, "claims under a new leader with the gate closed; "+l.ID+" upgraded", func() {
		setBin(l, newBin)
		if err := l.Restart(); err != nil {
			t.Fatal(err)
		}
		rejoined(l)
	})
	var on []string
	if err := Poll(ctx, 100*time.Millisecond, func() (bool, error) {
		on = enabled()
		return slices.Contains(on, "claim-publishing"), nil
	}); err != nil {
		t.Fatalf("the features were not enabled once every server was upgraded: %v (enabled %v)", err, on)
	}
	t.Logf("every server upgraded: enabled %v", on)
	round(7, "every server upgraded", nil)
	round(8, "every server upgraded", nil)

	// The previous release, started on a data dir whose snapshot was
	// written once the features were enabled, refuses it and stops.
	victim := a
	// Its snapshot turn comes every second (raft_snapshot_interval).
	fctx, fcancel := context.WithTimeout(ctx, time.Minute)
	defer fcancel()
	if err := Poll(fctx, 100*time.Millisecond, func() (bool, error) {
		// Every retained snapshot is of the enabled features' header
		// version: the server removed those an older binary could fall
		// back to.
		states, _ := filepath.Glob(filepath.Join(dir, victim.ID, "raft", "snapshots", "*", "state.bin"))
		for _, st := range states {
			if v, err := snapshotHeaderVersion(st); err != nil || v != 2 {
				return false, nil
			}
		}
		return len(states) > 0, nil
	}); err != nil {
		t.Fatalf("%s kept a snapshot from before the features were enabled: %v", victim.ID, err)
	}
	victim.Stop(20 * time.Second)
	setBin(victim, oldBin)
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-victim.Exited():
	case <-time.After(time.Minute):
		t.Fatalf("the previous release ran on a data dir of enabled features:\n%s", victim.Tail(3000))
	}
	refusal := victim.Tail(20000)
	if !strings.Contains(refusal, "cluster protocol version 2") {
		t.Fatalf("the previous release stopped without naming the snapshot it cannot read:\n%s", victim.Tail(3000))
	}
	for _, line := range strings.Split(refusal, "\n") {
		if strings.Contains(line, "cluster protocol version 2") {
			t.Logf("previous release refused: %s", strings.TrimSpace(line))
			break
		}
	}
	setBin(victim, newBin)
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	rejoined(victim)
	round(9, "every server upgraded, "+victim.ID+" back on the new binary", nil)
	// The node agents last, one at a time, while releases go through them.
	round(10, "node agents upgraded", func() {
		for _, n := range nodes {
			clients[n].Stop(10 * time.Second)
			startClient(n, newBin)
			registered(n)
		}
	})
	round(11, "servers and node agents on the new binary", nil)

	// The judges: the driver's log and state, the store's events, the
	// digests.
	calls, err := drv.Control.Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	underLive := 0
	for _, w := range windows {
		for _, c := range calls.Calls {
			if c.VolumeID != w.disk || !strings.HasPrefix(c.Method, "Node") && c.Method != "ControllerUnpublishVolume" {
				continue
			}
			destructive := c.Method == "ControllerUnpublishVolume" || c.Method == "NodeUnstageVolume" || c.Method == "NodeUnpublishVolume"
			if destructive && c.Start.After(w.granted) && c.Start.Before(w.release) {
				underLive++
				t.Errorf("%s of %s from %s at %s while claim %s was live (granted %s, released %s)", c.Method, w.disk, c.Caller,
					c.Start.Format(time.StampMicro), w.alloc, w.granted.Format(time.StampMicro), w.release.Format(time.StampMicro))
			}
		}
	}
	overlaps := overlappingDetaches(t, calls.Calls)
	attached, held := driverLeftovers(ctx, t, drv, disks, nodes, calls.Calls)
	removed, err := claimRemovals(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	once, notOnce := 0, 0
	for _, w := range windows {
		vol := ""
		for id, e := range ext {
			if e == w.disk {
				vol = id
			}
		}
		if n := removed[vol+"/"+w.alloc]; n == 1 {
			once++
		} else {
			notOnce++
			t.Errorf("claim %s of %s removed %d times", w.alloc, vol, n)
		}
	}
	d := compareDigests(ctx, t, cl, 3)
	t.Logf("upgrade report: previous release %s; %d claims, %d removed exactly once, %d not; %d claim retries; "+
		"%d destructive calls under a live claim; %d overlapping detaches; %d disks attached and %d node publishes left at the end; "+
		"%d driver calls judged; digests %s at command index %d; %s",
		commit[:12], len(windows), once, notOnce, claimRetries, underLive, overlaps, attached, held, len(calls.Calls),
		d.Verdict, d.Servers[0].CommandIndex, time.Since(start).Round(time.Second))
	b2, _ := json.Marshal(map[string]any{"claims": len(windows), "removed_once": once, "not_once": notOnce, "under_live": underLive,
		"overlaps": overlaps, "attached_at_end": attached, "node_calls_unmatched": held, "calls": len(calls.Calls), "claim_retries": claimRetries})
	if p := os.Getenv("VOLHOST_UPGRADE_REPORT"); p != "" {
		if err := os.WriteFile(p, b2, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
