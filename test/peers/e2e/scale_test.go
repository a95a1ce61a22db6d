package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestScaleCluster is the scale benchmark through raft with the real
// binary (the issue "a million volumes on a real three-server cluster"):
// three `volhost agent -server` processes with data dirs on this machine,
// VOLHOST_SCALE_VOLUMES volumes (default 20,000, what make e2e runs; make
// bench runs 1,000,000) loaded through PUT /v1/volumes 1,000 per request,
// VOLHOST_SCALE_CLAIMS claims (default a tenth of the volumes) made through
// the API by VOLHOST_SCALE_CLIENTS clients (16) and released after their
// allocations complete, then one follower restarted on its data dir and
// another wiped and rejoined. It reports, in one run, the figures of the
// issue's table: RSS per server, raft's own snapshots (from the servers'
// logs: how long each took and how many servers snapshotted at one moment),
// the operator snapshot save, the restart's restore and catch-up, the
// wiped follower's catch-up, claims/s, releases/s, GET /v1/stats and each
// route the web UI polls, and the leader changes during the run, whose
// target is zero. VOLHOST_SCALE_REPORT names a JSON file and
// VOLHOST_SCALE_MD a Markdown table for the figures; VOLHOST_SCALE_HCL is
// appended to every server's configuration (e.g. raft timings to compare);
// VOLHOST_SCALE_LOGS names a directory to keep the servers' logs in.
//
// It fails when a leader is lost (VOLHOST_SCALE_MAX_LEADER_CHANGES,
// default 0) or a phase does not complete; the figures are reported, not
// asserted: the machine is shared.
func TestScaleCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("three agent processes and tens of thousands of volumes")
	}
	nvol := chaosInt(t, "VOLHOST_SCALE_VOLUMES", 20000)
	nclaim := min(chaosInt(t, "VOLHOST_SCALE_CLAIMS", nvol/10), nvol)
	clients := max(chaosInt(t, "VOLHOST_SCALE_CLIENTS", 16), 1)
	maxLeaderChanges := chaosInt(t, "VOLHOST_SCALE_MAX_LEADER_CHANGES", 0)
	const nodes = 4

	// A million volumes load in minutes on a shared 2-core machine, and
	// its claims and releases run at a hundred or two a second there: the
	// budget grows with both.
	ctx, cancel := context.WithTimeout(context.Background(),
		10*time.Minute+time.Duration(nvol/1000)*3*time.Second+time.Duration(nclaim)*25*time.Millisecond)
	defer cancel()
	dir := t.TempDir()
	sock, err := os.MkdirTemp("", "vh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sock)
	// One mock driver per node (a node is one machine: its external
	// node ID is its own); the first also serves the controller.
	eps := make([]string, nodes)
	for i := range eps {
		csiSock, ctlSock := filepath.Join(sock, fmt.Sprintf("m%d.sock", i)), filepath.Join(sock, fmt.Sprintf("ctl%d.sock", i))
		drv, err := Start(dir, fmt.Sprintf("mockcsi-%d", i), bins.Mockcsi, "-endpoint", csiSock, "-control", ctlSock, "-node-id", fmt.Sprintf("mock-node-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		defer drv.Stop(5 * time.Second)
		ctl := NewControl(ctlSock)
		if err := Poll(ctx, 10*time.Millisecond, func() (bool, error) { return ctl.Ready(ctx), nil }); err != nil {
			t.Fatalf("mockcsi did not start: %v\n%s", err, drv.Tail(2000))
		}
		eps[i] = Endpoint(csiSock)
	}

	cfg := "log_level = \"info\"\nlog_json = true\n" + os.Getenv("VOLHOST_SCALE_HCL")
	c, err := StartCluster(ctx, dir, bins.Volhost, 3, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	defer func() {
		if t.Failed() {
			for _, s := range c.Servers {
				t.Logf("--- %s log tail ---\n%s", s.ID, s.Tail(6000))
			}
		}
		// VOLHOST_SCALE_LOGS keeps the servers' logs (a directory).
		if d := os.Getenv("VOLHOST_SCALE_LOGS"); d != "" {
			for _, s := range c.Servers {
				if b, err := os.ReadFile(s.Log); err == nil {
					_ = os.WriteFile(filepath.Join(d, s.ID+".log"), b, 0o644)
				}
			}
		}
	}()
	start := time.Now()
	rep := scaleReport{Volumes: nvol, Claims: nclaim, Clients: clients, Servers: len(c.Servers), Started: start.UTC(),
		RSSMaxMiB: map[string]int{}, RSSHeldMiB: map[string]int{}, RSSHeldParts: map[string][2]int{}, HeapHeldMiB: map[string][2]int{}}
	rss := startRSSSampler(c, rep.RSSMaxMiB)
	defer rss.stop()

	leader, err := c.WaitLeader(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	api := leader.API
	if _, err := api.do(ctx, http.MethodPut, "/v1/plugins", map[string]any{"plugin": map[string]any{"id": "mock", "controller_endpoint": eps[0]}}, nil); err != nil {
		t.Fatal(err)
	}
	nodeIDs := make([]string, nodes)
	for i := range nodeIDs {
		nodeIDs[i] = fmt.Sprintf("node-%d", i)
		n := map[string]any{"id": nodeIDs[i], "status": "ready", "root_dir": filepath.Join(dir, "root", nodeIDs[i]),
			"plugins": map[string]any{"mock": map[string]any{"endpoint": eps[i]}}}
		if _, err := api.do(ctx, http.MethodPut, "/v1/nodes", map[string]any{"node": n}, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Volumes, 1,000 per request, a few requests in flight (an operator's
	// import script would not send them one at a time either).
	rep.mark("loading volumes")
	t0 := time.Now()
	batches := (nvol + 999) / 1000
	if err := parallel(ctx, 4, batches, func(ctx context.Context, b int) error {
		vols := make([]VolumeSpec, 0, 1000)
		for i := b * 1000; i < min((b+1)*1000, nvol); i++ {
			vols = append(vols, VolumeSpec{ID: fmt.Sprintf("vol-%07d", i), Namespace: "default", ExternalID: fmt.Sprintf("mock-vol-%d", i),
				PluginID: "mock", AccessMode: "single-node-writer", AttachmentMode: "file-system"})
		}
		return c.Retry(ctx, func(ctx context.Context, a *API) error { return a.RegisterVolumes(ctx, vols) })
	}); err != nil {
		t.Fatalf("loading volumes: %v", err)
	}
	rep.LoadSeconds = time.Since(t0).Seconds()
	rep.VolumesPerSec = float64(nvol) / rep.LoadSeconds
	t.Logf("loaded %d volumes in %.1fs", nvol, rep.LoadSeconds)

	allocs := func(status string) error {
		return parallel(ctx, 2, (nclaim+999)/1000, func(ctx context.Context, b int) error {
			as := make([]AllocSpec, 0, 1000)
			for i := b * 1000; i < min((b+1)*1000, nclaim); i++ {
				as = append(as, AllocSpec{ID: fmt.Sprintf("alloc-%07d", i), Namespace: "default", NodeID: nodeIDs[i%nodes], JobID: "scale", ClientStatus: status})
			}
			return c.Retry(ctx, func(ctx context.Context, a *API) error { return a.UpsertAllocs(ctx, as) })
		})
	}
	rep.mark("allocations")
	if err := allocs("running"); err != nil {
		t.Fatalf("allocations: %v", err)
	}

	// Claims, one request each, with the UI's reads running beside them
	// (one poll of /v1/stats and of a claim-state list a second, what an
	// open overview and volumes page cost).
	ui := startReader(ctx, api, []string{"/v1/stats", "/v1/volumes?claim_state=taken&per_page=50"})
	rep.mark("claims")
	t0 = time.Now()
	var refused atomic.Int64
	if err := parallel(ctx, clients, nclaim, func(ctx context.Context, i int) error {
		return askAgain(ctx, &refused, func() error {
			return api.Claim(ctx, ClaimRequest{Namespace: "default", VolumeID: fmt.Sprintf("vol-%07d", i), AllocID: fmt.Sprintf("alloc-%07d", i),
				NodeID: nodeIDs[i%nodes], Mode: "write"})
		})
	}); err != nil {
		t.Fatalf("claims: %v", err)
	}
	rep.ClaimSeconds = time.Since(t0).Seconds()
	rep.ClaimsPerSec = float64(nclaim) / rep.ClaimSeconds
	rep.ReadsDuringClaims = ui.stop()
	rep.ClaimsRefused = int(refused.Load())
	t.Logf("%d claims in %.1fs (%.0f/s)", nclaim, rep.ClaimSeconds, rep.ClaimsPerSec)
	for _, s := range c.Servers {
		pid := s.cmd.Process.Pid
		rep.RSSHeldMiB[s.ID] = procRSSMiB(pid)
		rep.RSSHeldParts[s.ID] = [2]int{procStatusMiB(pid, "RssAnon"), procStatusMiB(pid, "RssFile")}
		if h, err := heapFigures(ctx, s.API); err == nil {
			rep.HeapHeldMiB[s.ID] = h
		}
	}
	rep.mark("UI routes timed, claims held")
	if rep.RoutesHeld, err = timeRoutes(ctx, api, 7); err != nil {
		t.Fatal(err)
	}

	// The operator's snapshot, from the leader, to a file.
	rep.mark("operator snapshot save")
	t0 = time.Now()
	n, err := saveSnapshot(ctx, api, filepath.Join(dir, "backup.snap"))
	if err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	rep.SnapshotSaveSeconds, rep.SnapshotBytes = time.Since(t0).Seconds(), n
	_ = os.Remove(filepath.Join(dir, "backup.snap"))

	// Releases: every allocation completes (1,000 per write); the watcher
	// releases each claim through the driver.
	ui = startReader(ctx, api, []string{"/v1/stats"})
	workBefore, workErr := readLeaderWork(ctx, api)
	serversBefore, serversErr := readServersWork(ctx, c)
	if l, err := c.WaitLeader(ctx, nil); err == nil {
		rep.ReleaseLeader = l.ID
	}
	rep.mark("releases")
	t0 = time.Now()
	if err := allocs("complete"); err != nil {
		t.Fatalf("completing allocations: %v", err)
	}
	if err := Poll(ctx, 200*time.Millisecond, func() (bool, error) {
		var st struct {
			Claims int `json:"claims"`
		}
		_, err := api.do(ctx, http.MethodGet, "/v1/stats", nil, &st)
		return err == nil && st.Claims == 0, nil
	}); err != nil {
		t.Fatalf("releases: %v", err)
	}
	rep.ReleaseSeconds = time.Since(t0).Seconds()
	rep.ReleasesPerSec = float64(nclaim) / rep.ReleaseSeconds
	if after, err := readLeaderWork(ctx, api); err == nil && workErr == nil {
		rep.ReleaseWork = after.minus(workBefore)
	} else {
		t.Logf("the leader's release work not read: %v", errors.Join(workErr, err))
	}
	if after, err := readServersWork(ctx, c); err == nil && serversErr == nil {
		rep.ReleaseServers = map[string]serverWork{}
		for id, w := range after {
			rep.ReleaseServers[id] = w.minus(serversBefore[id])
		}
	} else {
		t.Logf("the servers' release work not read: %v", errors.Join(serversErr, err))
	}
	rep.ReadsDuringReleases = ui.stop()
	t.Logf("%d releases in %.1fs (%.0f/s)", nclaim, rep.ReleaseSeconds, rep.ReleasesPerSec)
	rep.mark("UI routes timed, after the releases")
	if rep.RoutesReleased, err = timeRoutes(ctx, api, 7); err != nil {
		t.Fatal(err)
	}

	// A follower restarted on its own data dir, then another (not the
	// bootstrap seed, which has no -join) wiped and rejoined.
	leader, err = c.WaitLeader(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var followers []*Server
	for _, s := range c.Servers {
		if s != leader {
			followers = append(followers, s)
		}
	}
	slices.SortFunc(followers, func(a, b *Server) int { return strings.Compare(b.ID, a.ID) }) // s1 last
	rep.mark("follower restarted")
	if rep.Restart, err = restartFollower(ctx, c, followers[1], false, &rss.mu); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("restart %s: %+v", followers[1].ID, rep.Restart)
	rep.mark("follower wiped and rejoined")
	if rep.Rejoin, err = restartFollower(ctx, c, followers[0], true, &rss.mu); err != nil {
		t.Fatalf("wiped rejoin: %v", err)
	}
	t.Logf("wiped rejoin %s: %+v", followers[0].ID, rep.Rejoin)

	rss.stop()
	rep.Seconds = time.Since(start).Seconds()
	for _, s := range c.Servers {
		lr, err := scanLog(s.Log)
		if err != nil {
			t.Fatal(err)
		}
		rep.addLog(s.ID, lr)
	}
	rep.finish()
	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("scale report:\n%s", b)
	if p := os.Getenv("VOLHOST_SCALE_REPORT"); p != "" {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if p := os.Getenv("VOLHOST_SCALE_MD"); p != "" {
		if err := os.WriteFile(p, []byte(rep.markdown()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if rep.LeaderChanges > maxLeaderChanges {
		t.Fatalf("%d leader changes during the run (quorum lost %d times, heartbeat timeouts %d): the target is %d",
			rep.LeaderChanges, rep.QuorumLost, rep.HeartbeatTimeouts, maxLeaderChanges)
	}
}

// parallel runs f(i) for i in [0, n) on workers goroutines; the first
// error cancels the rest and is returned.
func parallel(ctx context.Context, workers, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(ctx, i); err != nil {
					cancel(fmt.Errorf("item %d: %w", i, err))
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// askAgain runs f again while it answers 503 (the leader could not confirm
// its leadership in time, or there is none for a moment: the claim was not
// made) or its answer is lost (it may have been made), as a client does,
// counting each in refused.
func askAgain(ctx context.Context, refused *atomic.Int64, f func() error) error {
	for {
		err := f()
		var he *HTTPError
		switch {
		case err == nil || ctx.Err() != nil:
			return err
		case errors.As(err, &he) && he.Status != http.StatusServiceUnavailable:
			return err
		}
		// A 503, or an answer lost on the way (the connection closed
		// before it came: a server starved past its write timeout). A
		// claim or a release asked again by the same allocation is
		// answered as the first one was, so asking again is what a
		// client does.
		refused.Add(1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// saveSnapshot streams GET /v1/operator/snapshot to path.
func saveSnapshot(ctx context.Context, a *API, path string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/v1/operator/snapshot", nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, &HTTPError{Status: resp.StatusCode, Body: string(b)}
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(f, resp.Body)
	if err != nil {
		return n, err
	}
	return n, f.Sync()
}

// restartReport is one follower's way back.
type restartReport struct {
	Server string `json:"server"`
	Wiped  bool   `json:"wiped"`
	// RestoreSeconds is raft's restore of the server's own snapshot at
	// start (its log: "starting restore from snapshot" to "restored from
	// snapshot"); zero for a wiped server, which installs the leader's.
	RestoreSeconds float64 `json:"restore_seconds"`
	// InstallSeconds is a snapshot installed from the leader (wiped
	// server): "copied to local snapshot" to "Installed remote snapshot".
	InstallSeconds float64 `json:"install_seconds,omitempty"`
	// CaughtUpSeconds is from the process start to the server serving,
	// from its own state (?stale=true), a write the leader committed while
	// it was down.
	CaughtUpSeconds float64 `json:"caught_up_seconds"`
}

// restartFollower stops f (SIGTERM), commits a marker write without it,
// optionally wipes its data dir, starts it again and waits until it serves
// the marker from its own state.
func restartFollower(ctx context.Context, c *Cluster, f *Server, wipe bool, procs *sync.Mutex) (restartReport, error) {
	r := restartReport{Server: f.ID, Wiped: wipe}
	f.Stop(time.Minute)
	marker := fmt.Sprintf("marker-%s-%t", f.ID, wipe)
	if err := c.Retry(ctx, func(ctx context.Context, a *API) error {
		return a.UpsertAllocs(ctx, []AllocSpec{{ID: marker, Namespace: "default", NodeID: "node-0", ClientStatus: "complete"}})
	}); err != nil {
		return r, err
	}
	if wipe {
		sdir := filepath.Join(f.dir, f.ID)
		if err := os.RemoveAll(sdir); err != nil {
			return r, err
		}
		if err := os.MkdirAll(sdir, 0o700); err != nil {
			return r, err
		}
	}
	logFrom, err := logSize(f.Log)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	procs.Lock()
	err = f.Restart()
	procs.Unlock()
	if err != nil {
		return r, err
	}
	err = Poll(ctx, 20*time.Millisecond, func() (bool, error) {
		select {
		case <-f.Exited():
			return false, fmt.Errorf("%s exited: %s", f.ID, f.Tail(3000))
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := f.API.do(cctx, http.MethodGet, "/v1/alloc/"+marker+"?stale=true", nil, nil)
		return err == nil, nil
	})
	if err != nil {
		return r, err
	}
	r.CaughtUpSeconds = time.Since(t0).Seconds()
	// A follower installing the leader's snapshot can serve the marker a
	// moment before raft logs the install's end (nothing left to replay
	// after a fresh snapshot): read the log again until that line is
	// there, for a few seconds; a follower that caught up from the log
	// alone never writes it.
	var lr logRead
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = Poll(lctx, 50*time.Millisecond, func() (bool, error) {
		var err error
		lr, err = scanLogFrom(f.Log, logFrom)
		return !wipe || lr.count("Installed remote snapshot") > 0, err
	})
	if err != nil && lctx.Err() == nil {
		return r, err
	}
	r.RestoreSeconds = lr.span("starting restore from snapshot", "restored from snapshot")
	r.InstallSeconds = lr.span("copied to local snapshot", "Installed remote snapshot")
	return r, nil
}

// uiRoutes are the reads the web UI makes on its pages (host/ui/assets/
// app.js): the overview's leader, peers, audit events and stats; the
// volumes page's stats and first page, with a claim-state filter; the
// stuck list, nodes, leftovers, modules and the events page.
var uiRoutes = []string{
	"/v1/stats",
	"/v1/status/leader",
	"/v1/operator/raft/configuration",
	"/v1/events?type=audit&per_page=1000",
	"/v1/volumes?per_page=50",
	"/v1/volumes?claim_state=taken&per_page=50",
	"/v1/volumes?stuck=true&per_page=50",
	"/v1/nodes",
	"/v1/volumes/leftovers",
	"/v1/modules",
	"/v1/events?per_page=1000",
	"/v1/events?type=module&per_page=1000",
}

// routeTiming is one route's latency over n requests, read in full.
type routeTiming struct {
	Route    string  `json:"route"`
	N        int     `json:"n"`
	MedianMs float64 `json:"median_ms"`
	MinMs    float64 `json:"min_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// timeRoutes requests every UI route n times, interleaved (round after
// round, so the machine's load falls on all alike).
func timeRoutes(ctx context.Context, a *API, n int) ([]routeTiming, error) {
	ms := make([][]float64, len(uiRoutes))
	for range n {
		for i, r := range uiRoutes {
			d, err := timeGet(ctx, a, r)
			if err != nil {
				return nil, fmt.Errorf("GET %s: %w", r, err)
			}
			ms[i] = append(ms[i], d)
		}
	}
	out := make([]routeTiming, len(uiRoutes))
	for i, r := range uiRoutes {
		out[i] = summarize(r, ms[i])
	}
	return out, nil
}

func summarize(route string, ms []float64) routeTiming {
	if len(ms) == 0 {
		return routeTiming{Route: route}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	return routeTiming{Route: route, N: len(s), MedianMs: s[len(s)/2], MinMs: s[0], MaxMs: s[len(s)-1]}
}

// timeGet is one GET, its answer read to the end, in milliseconds.
func timeGet(ctx context.Context, a *API, route string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+route, nil)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := float64(time.Since(t0).Microseconds()) / 1000
	if err == nil && resp.StatusCode != http.StatusOK {
		err = &HTTPError{Status: resp.StatusCode}
	}
	return d, err
}

// reader polls routes once a second each until stopped, as an open UI
// page does, and keeps their latencies.
type reader struct {
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
	routes   []string
	ms       [][]float64
}

func startReader(ctx context.Context, a *API, routes []string) *reader {
	ctx, cancel := context.WithCancel(ctx)
	r := &reader{cancel: cancel, done: make(chan struct{}), routes: routes, ms: make([][]float64, len(routes))}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			for i, route := range routes {
				if d, err := timeGet(ctx, a, route); err == nil {
					r.ms[i] = append(r.ms[i], d)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return r
}

func (r *reader) stop() []routeTiming {
	r.stopOnce.Do(func() { r.cancel(); <-r.done })
	out := make([]routeTiming, len(r.routes))
	for i, route := range r.routes {
		out[i] = summarize(route, r.ms[i])
	}
	return out
}

// rssSampler records each server's largest RSS, sampled every 500ms.
type rssSampler struct {
	// mu is held while a sample reads the servers' processes, and by
	// whoever replaces one (a restart).
	mu       sync.Mutex
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

func startRSSSampler(c *Cluster, into map[string]int) *rssSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &rssSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			s.mu.Lock()
			for _, sv := range c.Servers {
				if sv.Proc != nil && sv.Live() {
					into[sv.ID] = max(into[sv.ID], procRSSMiB(sv.cmd.Process.Pid))
				}
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() { s.stopOnce.Do(func() { s.cancel(); <-s.done }) }

// procRSSMiB is a process's resident set from /proc (0 if it is gone).
func procRSSMiB(pid int) int { return procStatusMiB(pid, "VmRSS") }

// procStatusMiB reads one kB field of /proc/PID/status in MiB: VmRSS, or
// its parts RssAnon (the Go heap and stacks) and RssFile (mapped files:
// the binary and raft's bolt log, which raft-boltdb reads through mmap).
func procStatusMiB(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb int
		if _, err := fmt.Sscanf(line, field+": %d kB", &kb); err == nil {
			return kb / 1024
		}
	}
	return 0
}

// readLeaderWork reads the leader's group commits of claim checkpoints
// and CSI calls from its metrics, as counted since it started.
func readLeaderWork(ctx context.Context, a *API) (leaderWork, error) {
	m, err := metricSamples(ctx, a)
	if err != nil {
		return leaderWork{}, err
	}
	w := leaderWork{Commits: m["volhost_checkpoint_commit_duration_seconds_count"],
		CommitSeconds: m["volhost_checkpoint_commit_duration_seconds_sum"],
		Checkpoints:   m["volhost_checkpoint_commit_checkpoints_sum"], CSI: map[string][2]float64{}}
	for name, v := range m {
		for i, prefix := range []string{`volhost_csi_call_duration_seconds_count{method="`, `volhost_csi_call_duration_seconds_sum{method="`} {
			if method, ok := strings.CutPrefix(name, prefix); ok {
				method = strings.TrimSuffix(method, `"}`)
				calls := w.CSI[method]
				calls[i] = v
				w.CSI[method] = calls
			}
		}
	}
	return w, nil
}

// readServersWork reads every server's serverWork counters.
func readServersWork(ctx context.Context, c *Cluster) (map[string]serverWork, error) {
	all := map[string]serverWork{}
	for _, s := range c.Servers {
		m, err := metricSamples(ctx, s.API)
		if err != nil {
			return nil, err
		}
		w := serverWork{CPUSeconds: m["process_cpu_seconds_total"], AllocBytes: m["go_memstats_alloc_bytes_total"],
			Collections: m["go_gc_duration_seconds_count"]}
		if w.CPUSeconds == 0 || w.AllocBytes == 0 {
			return nil, fmt.Errorf("metrics of %s: no process CPU or Go allocation counters", s.ID)
		}
		all[s.ID] = w
	}
	return all, nil
}

// metricSamples is a server's /v1/metrics as samples: the name with its
// labels, as the Prometheus text format writes it, to the value.
func metricSamples(ctx context.Context, a *API) (map[string]float64, error) {
	b, err := readMetrics(ctx, a)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, nil
}

// readMetrics is a server's /v1/metrics.
func readMetrics(ctx context.Context, a *API) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/v1/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// heapFigures reads a server's Go heap from its metrics (the Go
// collector's): the heap in use and half the next collection's goal,
// which under GOGC=100 is the heap the last collection found live, in MiB.
func heapFigures(ctx context.Context, a *API) ([2]int, error) {
	m, err := metricSamples(ctx, a)
	if err != nil {
		return [2]int{}, err
	}
	inuse, next := m["go_memstats_heap_inuse_bytes"], m["go_memstats_next_gc_bytes"]
	if inuse == 0 || next == 0 {
		return [2]int{}, fmt.Errorf("metrics of %s: no Go heap figures", a.base)
	}
	return [2]int{int(inuse / (1 << 20)), int(next / 2 / (1 << 20))}, nil
}
