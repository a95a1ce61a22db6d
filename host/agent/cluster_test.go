package agent

// Multi-server tests: three agents in one process, joined over
// their HTTP APIs, raft over connected in-memory transports (so a test can
// partition a server), state in data dirs, one scripted CSI plugin shared
// by all of them.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/api/client"
	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// Raft timings of the agent cluster tests: short enough for a quick
// failover, long enough that a loaded 2-core machine under -race does not
// hold elections in the middle of the setup.
const (
	testHeartbeat = 500 * time.Millisecond
	testLease     = 250 * time.Millisecond
)

// retryNoLeader runs a write again while the cluster answers 503 "no
// cluster leader" (a leadership change under load), as a client should;
// any other outcome is returned.
func retryNoLeader(t testing.TB, write func() error) error {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := write()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return err
		}
		t.Logf("retrying after %v", err)
		backoff := time.NewTimer(50 * time.Millisecond) // a client's retry backoff
		<-backoff.C
	}
}

type clusterAgent struct {
	id    string
	a     *Agent
	c     *client.Client
	trans *raft.InmemTransport
	down  bool
}

type agentCluster struct {
	t      testing.TB
	agents []*clusterAgent
}

// startAgentCluster starts n server agents: s1 is the bootstrap_expect
// seed, the others join it through its HTTP API (retry-join).
func startAgentCluster(t testing.TB, n int) *agentCluster {
	t.Helper()
	ac := &agentCluster{t: t}
	var seed string
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("s%d", i)
		_, trans := raft.NewInmemTransport(raft.ServerAddress("raft-" + id))
		for _, o := range ac.agents {
			o.trans.Connect(trans.LocalAddr(), trans)
			trans.Connect(o.trans.LocalAddr(), o.trans)
		}
		cfg := DefaultConfig()
		cfg.DataDir = t.TempDir()
		cfg.NodeID = id
		cfg.HTTP.Address = "127.0.0.1:0"
		cfg.Watcher.BackoffBase = "10ms"
		cfg.Watcher.BackoffMax = "50ms"
		cfg.Watcher.CSITimeout = "30s"
		cfg.Server = &ServerConfig{Enabled: true, RetryMaxInterval: "200ms"}
		if i == 1 {
			cfg.Server.BootstrapExpect = n
		} else {
			cfg.Server.Join = []string{seed}
		}
		a, err := New(cfg, Options{
			Logger: hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: logOutput(t)}),
			TuneCluster: func(cc *cluster.Config) {
				cc.Transport = trans
				cc.HeartbeatTimeout = testHeartbeat
				cc.ElectionTimeout = testHeartbeat
				cc.LeaderLeaseTimeout = testLease
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		ca := &clusterAgent{id: id, a: a, trans: trans}
		t.Cleanup(func() {
			if !ca.down {
				_ = a.Shutdown()
			}
		})
		if ca.c, err = client.New("http://"+a.HTTPAddr(), nil); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			seed = a.HTTPAddr()
		}
		ac.agents = append(ac.agents, ca)
	}
	l := ac.leader()
	ac.waitFor("all servers in the raft configuration with HTTP addresses", func() bool {
		return len(l.a.Cluster.Members()) == n
	})
	return ac
}

func (ac *agentCluster) waitFor(what string, cond func() bool) {
	ac.t.Helper()
	testutil.WaitFor(ac.t, what, cond)
}

func (ac *agentCluster) live() []*clusterAgent {
	var out []*clusterAgent
	for _, a := range ac.agents {
		if !a.down {
			out = append(out, a)
		}
	}
	return out
}

// leader waits until one of the given agents leads with its watcher on.
func (ac *agentCluster) leader(among ...*clusterAgent) *clusterAgent {
	ac.t.Helper()
	if len(among) == 0 {
		among = ac.live()
	}
	var l *clusterAgent
	ac.waitFor("a leader with its watcher enabled", func() bool {
		for _, a := range among {
			if a.a.Cluster.IsLeader() && a.a.Watcher.Enabled() {
				l = a
				return true
			}
		}
		return false
	})
	return l
}

func (ac *agentCluster) follower(l *clusterAgent) *clusterAgent {
	for _, a := range ac.live() {
		if a != l {
			return a
		}
	}
	ac.t.Fatal("no follower")
	return nil
}

// claimsLeft counts the claims still on volumes in a's store.
func claimsLeft(t testing.TB, a *Agent) int {
	vols, err := a.Store.Snapshot().Volumes(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range vols {
		n += len(v.Claims)
	}
	return n
}

// setupVolumes registers the plugin, a node, n single-writer volumes
// (disk-i) and running allocations (web-i), and claims each volume, all
// through c (a follower's API: every write is forwarded to the leader).
func setupVolumes(t testing.TB, c *client.Client, drv *csitest.Server, n int) {
	t.Helper()
	ctx := context.Background()
	if err := retryNoLeader(t, func() error {
		_, err := c.RegisterPlugin(ctx, &structs.Plugin{ID: "csi", ControllerEndpoint: drv.Endpoint()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := retryNoLeader(t, func() error {
		_, err := c.RegisterNode(ctx, &structs.Node{ID: "node1", RootDir: root, Plugins: map[string]*structs.NodePlugin{
			"csi": {Endpoint: drv.Endpoint()},
		}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var vols []*structs.Volume
	var allocs []*structs.Alloc
	for i := range n {
		vols = append(vols, &structs.Volume{
			ID: fmt.Sprintf("vol-%d", i), ExternalID: fmt.Sprintf("disk-%d", i), PluginID: "csi",
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
		})
		allocs = append(allocs, &structs.Alloc{ID: fmt.Sprintf("web-%d", i), NodeID: "node1", ClientStatus: structs.AllocRunning})
	}
	if err := retryNoLeader(t, func() error { _, err := c.RegisterVolumes(ctx, vols); return err }); err != nil {
		t.Fatal(err)
	}
	if err := retryNoLeader(t, func() error { _, err := c.UpsertAllocs(ctx, allocs); return err }); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		err := retryNoLeader(t, func() error {
			_, err := c.ClaimVolume(ctx, &structs.ClaimRequest{
				VolumeID: fmt.Sprintf("vol-%d", i), AllocID: fmt.Sprintf("web-%d", i), NodeID: "node1", Mode: structs.ClaimWrite,
			})
			return err
		})
		if err != nil {
			// A retried claim whose first attempt committed just before
			// leadership moved is refused as a duplicate: it is there.
			v, _, verr := c.Volume(ctx, "default", fmt.Sprintf("vol-%d", i), nil)
			if verr != nil || v.Claims[fmt.Sprintf("web-%d", i)] == nil {
				t.Fatalf("claim %d: %v", i, err)
			}
		}
	}
}

// finishAllocs marks web-0..n-1 complete, which starts every release.
func finishAllocs(t testing.TB, c *client.Client, n int) {
	t.Helper()
	var allocs []*structs.Alloc
	for i := range n {
		allocs = append(allocs, &structs.Alloc{ID: fmt.Sprintf("web-%d", i), NodeID: "node1", ClientStatus: structs.AllocComplete})
	}
	if err := retryNoLeader(t, func() error { _, err := c.UpsertAllocs(context.Background(), allocs); return err }); err != nil {
		t.Fatal(err)
	}
}

// Kill the leader in the middle of 200 releases: a new leader resumes,
// every claim ends ready-to-free and is removed exactly once, and
// ControllerUnpublish never ran twice at once for one volume.
func TestClusterFailoverMidRelease(t *testing.T) {
	const n = 200
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	ac := startAgentCluster(t, 3)
	old := ac.leader()
	setupVolumes(t, ac.follower(old).c, drv, n)

	// The old leader completes 80 controller detaches, then hangs on the
	// 81st until it dies (its shutdown cancels the call).
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	script := make([]csitest.Result, 80)
	drv.Script(csitest.ControllerUnpublish, append(script, csitest.Result{Block: hang})...)
	start := time.Now()
	finishAllocs(t, ac.follower(old).c, n)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := drv.WaitFor(ctx, func() bool {
		return len(drv.Calls(csitest.ControllerUnpublish)) == 81 && drv.InFlight(csitest.ControllerUnpublish) == 1
	}); err != nil {
		t.Fatal(err)
	}
	// Kill whoever leads now (a loaded machine may have moved leadership
	// during the first 80 releases).
	victim := ac.leader()
	if left := claimsLeft(t, victim.a); left == 0 || left == n {
		t.Fatalf("%d claims left at the kill: not in the middle", left)
	}
	killed := time.Now()
	if err := victim.a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	victim.down = true

	nl := ac.leader()
	ac.waitFor("every claim released by the new leader", func() bool { return claimsLeft(t, nl.a) == 0 })
	t.Logf("%d releases in %v; failover from leader kill to all released: %v", n, time.Since(start).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	// Every survivor holds the same state.
	f := ac.follower(nl)
	ac.waitFor("the follower to converge", func() bool {
		d1, _ := nl.a.Store.Digest()
		d2, _ := f.a.Store.Digest()
		return d1 == d2
	})

	// Each claim reached ready-to-free and was removed exactly once.
	evs, err := nl.a.Store.Snapshot().Events(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	freed := map[string]int{}
	for _, e := range evs {
		if e.Type == structs.EventClaimTransition && e.Fields["state"] == string(structs.ClaimReadyToFree) {
			freed[e.AllocID]++
		}
	}
	perClaim := map[int]int{} // unpublish calls -> claims
	for i := range n {
		alloc, disk := fmt.Sprintf("web-%d", i), fmt.Sprintf("disk-%d", i)
		if freed[alloc] != 1 {
			t.Errorf("claim %s removed %d times", alloc, freed[alloc])
		}
		if m := drv.MaxInFlight(csitest.ControllerUnpublish, disk); m != 1 {
			t.Errorf("volume %s: %d ControllerUnpublish calls at once", disk, m)
		}
		if drv.Attached(disk, "ext-node1") {
			t.Errorf("volume %s still attached", disk)
		}
		calls := 0
		for _, c := range drv.Calls(csitest.ControllerUnpublish) {
			if c.VolumeID == disk {
				calls++
			}
		}
		perClaim[calls]++
	}
	keys := make([]int, 0, len(perClaim))
	for k := range perClaim {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("claims with %d ControllerUnpublish call(s): %d", k, perClaim[k])
	}
	if perClaim[0] != 0 {
		t.Errorf("%d claims were freed without a ControllerUnpublish", perClaim[0])
	}
}

// Partition the leader while its ControllerUnpublish hangs: it steps down,
// its watcher stops and cancels the call, the majority's new leader waits
// out the old lease before its own controller call (never two at once for
// the volume), writes to the old leader fail fast with 503, and after
// healing the old leader holds the majority's state.
func TestClusterPartitionedLeaderStopsWatcher(t *testing.T) {
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	ac := startAgentCluster(t, 3)
	old := ac.leader()
	setupVolumes(t, ac.follower(old).c, drv, 1)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	drv.Script(csitest.ControllerUnpublish, csitest.Result{Block: hang})
	finishAllocs(t, old.c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := drv.WaitFor(ctx, func() bool { return drv.InFlight(csitest.ControllerUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}

	// Partition: the old leader hears nobody and nobody hears it.
	old.trans.DisconnectAll()
	var majority []*clusterAgent
	for _, a := range ac.agents {
		if a != old {
			a.trans.Disconnect(old.trans.LocalAddr())
			majority = append(majority, a)
		}
	}
	ac.waitFor("the old leader's watcher to stop", func() bool { return !old.a.Watcher.Enabled() })
	nl := ac.leader(majority...)
	ac.waitFor("the release to finish on the new leader", func() bool { return claimsLeft(t, nl.a) == 0 })
	if m := drv.MaxInFlight(csitest.ControllerUnpublish, "disk-0"); m != 1 {
		t.Fatalf("%d ControllerUnpublish calls ran at once across the failover", m)
	}
	calls := drv.Calls(csitest.ControllerUnpublish)
	if len(calls) != 2 || calls[0].Code.String() != "Canceled" || !calls[1].Start.After(calls[0].End) {
		t.Fatalf("unpublish calls %+v: want the old leader's cancelled call, then the new leader's", calls)
	}
	t.Logf("old leader's call cancelled %v before the new leader's started", calls[1].Start.Sub(calls[0].End).Round(time.Millisecond))

	// The partitioned server takes no writes: 503 at once, not a hang.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	_, err := old.c.SetNodeStatus(wctx, "node1", structs.NodeDown)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("write on the partitioned old leader: %v", err)
	}

	for _, a := range majority {
		a.trans.Connect(old.trans.LocalAddr(), old.trans)
		old.trans.Connect(a.trans.LocalAddr(), a.trans)
	}
	ac.waitFor("the old leader to catch up", func() bool {
		d1, _ := nl.a.Store.Digest()
		d2, _ := old.a.Store.Digest()
		return d1 == d2 && claimsLeft(t, old.a) == 0
	})
}

// A graceful transfer (volhost operator raft transfer-leader, sent to a
// follower and forwarded) stops the old leader's watcher, cancelling its
// hanging ControllerUnpublish, before leadership moves; the new leader
// finishes the release, and the two calls never overlap.
func TestClusterTransferLeaderStopsWatcherFirst(t *testing.T) {
	drv := csitest.NewServer(t, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
	ac := startAgentCluster(t, 3)
	old := ac.leader()
	f := ac.follower(old)
	setupVolumes(t, f.c, drv, 1)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	drv.Script(csitest.ControllerUnpublish, csitest.Result{Block: hang})
	finishAllocs(t, f.c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := drv.WaitFor(ctx, func() bool { return drv.InFlight(csitest.ControllerUnpublish) == 1 }); err != nil {
		t.Fatal(err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+f.a.HTTPAddr()+"/v1/operator/raft/transfer-leader?id="+f.id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("transfer-leader: %s", resp.Status)
	}
	// By the time the transfer answered, the old watcher was stopped and
	// its call had returned.
	if old.a.Watcher.Enabled() {
		t.Fatal("old leader's watcher still enabled after the transfer")
	}
	if nl := ac.leader(); nl != f {
		t.Fatalf("leader is %s, want %s", nl.id, f.id)
	}
	ac.waitFor("the release to finish on the new leader", func() bool { return claimsLeft(t, f.a) == 0 })
	calls := drv.Calls(csitest.ControllerUnpublish)
	if m := drv.MaxInFlight(csitest.ControllerUnpublish, "disk-0"); m != 1 || len(calls) != 2 || !calls[1].Start.After(calls[0].End) {
		t.Fatalf("max in flight %d, calls %+v", m, calls)
	}
}

// BenchmarkFailover measures the failover time from killing the leader (in
// the middle of a controller detach) to the first release completed by the
// new leader: election, the step-up barrier, StepUpDelay (2 x 250ms lease
// + 1s cancel margin) and the resumed release. Raft timings: heartbeat and
// election 500ms, lease 250ms. Run with -benchtime=5x: the median with
// min and max is reported.
func BenchmarkFailover(b *testing.B) {
	var took []float64 // seconds, by failover
	for range b.N {
		b.StopTimer()
		drv := csitest.NewServer(b, csitest.Options{NodeID: "ext-node1", PublishUnpublish: true, StageUnstage: true})
		ac := startAgentCluster(b, 3)
		old := ac.leader()
		setupVolumes(b, ac.follower(old).c, drv, 1)
		hang := make(chan struct{})
		drv.Script(csitest.ControllerUnpublish, csitest.Result{Block: hang})
		finishAllocs(b, old.c, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		if err := drv.WaitFor(ctx, func() bool { return drv.InFlight(csitest.ControllerUnpublish) == 1 }); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		killed := time.Now()
		_ = old.a.Shutdown()
		old.down = true
		nl := ac.leader()
		ac.waitFor("the release on the new leader", func() bool { return claimsLeft(b, nl.a) == 0 })
		took = append(took, time.Since(killed).Seconds())
		b.StopTimer()
		cancel()
		close(hang)
		for _, a := range ac.live() {
			_ = a.a.Shutdown()
			a.down = true
		}
	}
	// The median with min and max, not a mean: one slow election in a
	// few runs would move a mean of them by its whole excess.
	testutil.ReportSpread(b, took, "s/failover")
}

// logOutput keeps agent logs out of a benchmark's output, where they would
// split its result line; tests keep them on stderr for failures.
func logOutput(tb testing.TB) io.Writer {
	if _, ok := tb.(*testing.B); ok {
		return io.Discard
	}
	return hclog.DefaultOutput
}
