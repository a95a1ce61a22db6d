package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The Nomad bridge against a real Nomad v1.11.3 agent (make nomad builds
// it): Nomad places the jobs of examples/nomad, the bridge mirrors their
// allocations and claims their volumes, the GCE PD driver publishes them,
// the raw_exec tasks write to the published path, and the claims are
// released when the client reports the allocation ended.

// nomadEnv is an env whose agent mirrors a real Nomad dev agent (node n1).
type nomadEnv struct {
	*env
	nomad *Nomad
}

// nomadEnvOptions size a Nomad scenario: its time budget, the driver's
// nodes (n1, Nomad's dev node, when empty), and whether Nomad marks a
// silent client down within seconds (NomadOptions.FastNodeLoss: only the
// tests of lost nodes, the others keep a grace a loaded machine cannot
// miss).
type nomadEnvOptions struct {
	timeout      time.Duration
	nodes        []string
	fastNodeLoss bool
}

func newNomadEnv(t *testing.T, o nomadEnvOptions) *nomadEnv {
	t.Helper()
	bin, err := NomadBin()
	if err != nil {
		t.Skipf("the Nomad scenarios need a Nomad %s binary: %v", NomadVersion, err)
	}
	ndir, err := os.MkdirTemp("", "vhn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ndir) })
	nodes := o.nodes
	if len(nodes) == 0 {
		nodes = []string{"n1"}
	}
	e := newEnv(t, envOptions{nodes: nodes, extra: "\nscheduler \"nomad\" {\n  address = \"NOMAD_ADDR\"\n  relist_interval = \"5s\"\n  retry_max = \"2s\"\n}\n",
		deferAgent: true, timeout: o.timeout})
	nm, err := StartNomad(e.ctx, ndir, bin, "n1", NomadOptions{FastNodeLoss: o.fastNodeLoss})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nomad log tail:\n%s", nm.Tail(6000))
		}
		nm.Stop()
		KillByDir(e.dir)
	})
	e.startAgent(strings.ReplaceAll(e.agentCfg, "NOMAD_ADDR", nm.Addr))
	return &nomadEnv{env: e, nomad: nm}
}

// runService runs examples/nomad's service job with vars (its volume vol,
// placed on node) and waits until its task writes to the published
// volume: it returns the allocation and the file the task keeps writing.
func (e *nomadEnv) runService(node, vol string, vars []string) (NomadAlloc, string) {
	e.t.Helper()
	e.run(append(append([]string{"job", "run", "-detach"}, vars...), example("service-delay.nomad.hcl"))...)
	a, err := e.nomad.WaitAlloc(e.ctx, "volhost-service", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	heartbeat := filepath.Join(e.dir, "root-"+node, "csi", e.plugin, "per-alloc", a.ID, "default", vol, "heartbeat")
	if err := Poll(e.ctx, 20*time.Millisecond, func() (bool, error) {
		_, err := os.Stat(heartbeat)
		return err == nil, nil
	}); err != nil {
		e.t.Fatalf("the task never wrote to the published volume: %v", err)
	}
	return a, heartbeat
}

// example is a job file of examples/nomad.
func example(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "nomad", name)
}

// jobVars are the -var flags that point an example job at this env.
func (e *nomadEnv) jobVars(vol string, more ...string) []string {
	return e.jobVarsOn("n1", vol, more...)
}

// jobVarsOn: the job's root_dir is node's (the example jobs take one
// root_dir: every node of a real cluster would have the same).
func (e *nomadEnv) jobVarsOn(node, vol string, more ...string) []string {
	args := []string{"-var", "root_dir=" + filepath.Join(e.dir, "root-"+node), "-var", "plugin=" + e.plugin, "-var", "volume=" + vol,
		"-var", "cleanup=true"}
	for _, m := range more {
		args = append(args, "-var", m)
	}
	return args
}

func (e *nomadEnv) run(args ...string) string {
	e.t.Helper()
	out, err := e.nomad.CLI(e.ctx, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// schedulerStatus is the leader's bridge status.
func (e *nomadEnv) schedulerStatus() map[string]any {
	e.t.Helper()
	var st []map[string]any
	if err := json.Unmarshal([]byte(e.cli(0, "scheduler", "status", "-json")), &st); err != nil || len(st) != 1 {
		e.t.Fatalf("scheduler status -json: %v %v", err, st)
	}
	return st[0]
}

// TestNomadBatchJob: a batch job's volume is claimed when Nomad places the
// allocation, published, written by the task, and released once the
// client reports it complete. VOLHOST_NOMAD_RUNS runs it that many times
// and reports the latency from the client's terminal status reaching
// Nomad's server (the allocation's ModifyTime there) to the claim's
// removal (the time of volhost's "released and removed" event), split at
// the bridge's commit of the terminal status (the allocation's ModifyTime
// in volhost): BENCHMARKS.md.
func TestNomadBatchJob(t *testing.T) {
	runs := 1
	if s := os.Getenv("VOLHOST_NOMAD_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("VOLHOST_NOMAD_RUNS=%q", s)
		}
		runs = n
	}
	e := newNomadEnv(t, nomadEnvOptions{timeout: 3*time.Minute + time.Duration(runs)*15*time.Second})
	e.volume("vol1", "disk-0")
	seen := map[string]bool{}
	var lat, mirror, release []time.Duration
	for i := range runs {
		e.run(append(append([]string{"job", "run", "-detach"}, e.jobVars("vol1")...), example("batch-write.nomad.hcl"))...)
		a, err := e.nomad.WaitAlloc(e.ctx, "volhost-batch", seen)
		if err != nil {
			t.Fatal(err)
		}
		seen[a.ID] = true
		// The task ends only after writing to the published path; the
		// release waits for the client's complete.
		var done NomadAlloc
		if err := Poll(e.ctx, 5*time.Millisecond, func() (bool, error) {
			var err error
			done, err = e.nomad.Alloc(e.ctx, a.ID)
			return err == nil && done.Terminal(), nil
		}); err != nil {
			t.Fatal(err)
		}
		e.waitReleased("vol1")
		if done.ClientStatus != "complete" {
			t.Fatalf("run %d: allocation %s is %s:\n%s", i, a.ID, done.ClientStatus, e.run("alloc", "logs", "-stderr", a.ID))
		}
		terminal := time.Unix(0, done.ModifyTime)
		mirrored, removed := e.releaseTimes("vol1", a.ID)
		lat = append(lat, removed.Sub(terminal))
		mirror = append(mirror, mirrored.Sub(terminal))
		release = append(release, removed.Sub(mirrored))
		if logs := e.run("alloc", "logs", a.ID); !strings.Contains(logs, "written by allocation "+a.ID) {
			t.Fatalf("the task did not write to the published volume:\n%s", logs)
		}
		mustContain(t, "alloc status", e.cli(0, "alloc", "status", a.ID), "complete")
		if i < runs-1 {
			e.run("job", "stop", "-purge", "volhost-batch")
		}
	}
	want := []string{"controller:ControllerPublishVolume:OK", "n1:NodeStageVolume:OK", "n1:NodePublishVolume:OK",
		"n1:NodeUnpublishVolume:OK", "n1:NodeUnstageVolume:OK", "controller:ControllerUnpublishVolume:OK"}
	var wantAll []string
	for range runs {
		wantAll = append(wantAll, want...)
	}
	if got := e.calls(); !slices.Equal(got, wantAll) {
		t.Fatalf("driver calls = %v, want %v", got, wantAll)
	}
	if e.attached("disk-0", "n1") {
		t.Fatal("disk-0 still attached after the release")
	}
	st := e.schedulerStatus()
	if st["state"] != "streaming" || st["last_error"] != nil || st["claims"].(float64) != float64(runs) {
		t.Fatalf("scheduler status = %v", st)
	}
	t.Logf("client terminal -> claim removed over %d runs: %s", runs, spread(lat))
	t.Logf("  of which client terminal -> committed in volhost by the bridge: %s", spread(mirror))
	t.Logf("  and committed -> claim removed (the watcher's release, 3 CSI calls): %s", spread(release))
}

// releaseTimes reads when the bridge committed allocation alloc's terminal
// status (its ModifyTime in volhost) and when its claim on vol was removed
// (the "released and removed" event).
func (e *nomadEnv) releaseTimes(vol, alloc string) (mirrored, removed time.Time) {
	e.t.Helper()
	va, err := e.agent.API.Alloc(e.ctx, alloc)
	if err != nil {
		e.t.Fatal(err)
	}
	evs, err := e.agent.API.Events(e.ctx, url.Values{"volume_id": {vol}, "type": {"claim-transition"}})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.AllocID == alloc && strings.Contains(ev.Message, "released and removed") {
			return va.ModifyTime, ev.Time
		}
	}
	e.t.Fatalf("no removal event for the claim of %s on %s: %+v", alloc, vol, evs)
	return
}

// spread is the median, p99, min and max of ds (sorted in place).
func spread(ds []time.Duration) string {
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("median %s, p99 %s, min %s, max %s", r(ds[len(ds)/2]), r(ds[(len(ds)*99+99)/100-1]), r(ds[0]), r(ds[len(ds)-1]))
}

// TestNomadShutdownDelay: a service job with shutdown_delay stopped: for
// the delay Nomad reports the allocation pending with desired status stop
// while its task keeps writing; the claim stays until the client reports
// the allocation complete (hashicorp/nomad #24130, #25819: Nomad itself
// unmounted during the delay).
func TestNomadShutdownDelay(t *testing.T) {
	e := newNomadEnv(t, nomadEnvOptions{timeout: 3 * time.Minute})
	e.volume("vol2", "disk-1")
	a, heartbeat := e.runService("n1", "vol2", e.jobVars("vol2", "shutdown_delay=6s"))
	stopped := time.Now()
	e.run("job", "stop", "-detach", "volhost-service")
	var sawDelay bool
	var last NomadAlloc
	var lastWrite time.Time
	if err := Poll(e.ctx, 25*time.Millisecond, func() (bool, error) {
		v, _, err := e.agent.API.Volume(e.ctx, "vol2", 0, 0)
		if err != nil {
			return false, err
		}
		// Read Nomad after volhost: a release seen here happened before
		// this read of the client's status.
		last, err = e.nomad.Alloc(e.ctx, a.ID)
		if err != nil {
			return false, err
		}
		if last.DesiredStatus == "stop" && !last.Terminal() {
			sawDelay = true
			if fi, err := os.Stat(heartbeat); err == nil {
				lastWrite = fi.ModTime()
			}
		}
		if len(v.Claims) == 0 && !last.Terminal() {
			return false, fmt.Errorf("claim released while Nomad reports the allocation %s (desired %s)", last.ClientStatus, last.DesiredStatus)
		}
		return last.Terminal(), nil
	}); err != nil {
		t.Fatal(err)
	}
	e.waitReleased("vol2")
	if !sawDelay {
		t.Fatal("never saw the allocation live with desired status stop: no shutdown delay to test")
	}
	if w := lastWrite.Sub(stopped); w < 4*time.Second {
		t.Fatalf("the task's last write seen during the delay was %s after the stop, want most of the 6s delay", w)
	}
	t.Logf("the task wrote for %s after the stop; released %s after the client's %s",
		lastWrite.Sub(stopped).Round(time.Millisecond), time.Since(time.Unix(0, last.ModifyTime)).Round(time.Millisecond), last.ClientStatus)
}

// TestNomadLostNode: a Nomad client is killed while its allocation holds a
// volume. Nomad marks the node down and the allocation lost within
// seconds, while the task keeps running there: volhost marks the node
// down (held like a lost heartbeat), keeps the allocation live and its
// claim published, and says so once; the operator powers the machine off
// and fences it; the claim is released without node steps, with the
// fence's reason; `nomad system gc` removes the node and the bridge sees
// it gone.
func TestNomadLostNode(t *testing.T) {
	e := newNomadEnv(t, nomadEnvOptions{timeout: 4 * time.Minute, nodes: []string{"n1", "n2"}, fastNodeLoss: true})
	n2, err := e.nomad.StartClient(e.ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n2.Stop)
	e.volume("vol3", "disk-2")
	a, heartbeat := e.runService("n2", "vol3", e.jobVarsOn("n2", "vol3", "node=n2", "shutdown_delay=0s"))

	n2.Kill()
	if err := Poll(e.ctx, 50*time.Millisecond, func() (bool, error) {
		got, err := e.nomad.Alloc(e.ctx, a.ID)
		return err == nil && got.ClientStatus == "lost", nil
	}); err != nil {
		t.Fatalf("Nomad never marked the allocation lost: %v", err)
	}
	e.waitNode("n2", func(out string) bool { return strings.Contains(out, "Nomad reports the node down") })
	if err := Poll(e.ctx, 50*time.Millisecond, func() (bool, error) {
		return e.schedulerStatus()["held"].(float64) == 1, nil
	}); err != nil {
		t.Fatalf("the lost allocation is not held: %v", err)
	}
	if out := e.cli(0, "alloc", "status", a.ID); !strings.Contains(out, "running") && !strings.Contains(out, "pending") {
		t.Fatalf("the lost allocation is not mirrored live:\n%s", out)
	}
	if v, _, err := e.agent.API.Volume(e.ctx, "vol3", 0, 0); err != nil || v.Claims[a.ID] == nil {
		t.Fatalf("the lost allocation's claim is gone before any fence: %v %+v", err, v)
	}
	if !e.attached("disk-2", "n2") {
		t.Fatal("disk-2 detached from the lost node before any fence")
	}
	// Why: the task still runs on the dead client's machine.
	before, _ := os.Stat(heartbeat)
	if err := Poll(e.ctx, 50*time.Millisecond, func() (bool, error) {
		fi, err := os.Stat(heartbeat)
		return err == nil && fi.ModTime().After(before.ModTime()), nil
	}); err != nil {
		t.Fatal("the task on the lost node stopped writing: the scenario proves nothing")
	}
	mustContain(t, "events", e.cli(0, "events", "-type", "scheduler"), "held until the node is fenced")

	// The operator powers the machine off, then fences it.
	KillByDir(filepath.Join(e.dir, "root-n2"))
	e.cli(0, "node", "fence", "-reason", "n2 powered off by the test", "n2")
	e.waitReleased("vol3")
	for _, c := range e.calls() {
		if strings.HasPrefix(c, "n2:NodeUnpublish") || strings.HasPrefix(c, "n2:NodeUnstage") {
			t.Fatalf("a node step ran on the fenced node: %v", e.calls())
		}
	}
	if e.attached("disk-2", "n2") {
		t.Fatal("disk-2 still attached to n2 after the fence")
	}
	mustContain(t, "alloc status", e.cli(0, "alloc", "status", a.ID), "lost")
	mustContain(t, "events", e.cli(0, "events"), "n2 powered off by the test")

	// system gc removes the dead node, with no event: the re-list sees it.
	e.run("system", "gc")
	e.waitNode("n2", func(out string) bool { return strings.Contains(out, "gone") })
	mustContain(t, "events", e.cli(0, "events", "-type", "scheduler"), "was removed from Nomad")
}

// TestNomadLostNodeBack: a Nomad client stops answering (paused: what a
// network partition looks like to its server) while its allocation holds
// a volume; Nomad marks the node down and the allocation lost while the
// task keeps writing. When the partition heals Nomad reports the node
// ready at once, before the client has stopped the task it lost: the
// claim stays until the client reports the allocation again and then
// complete. The driver answers NodeUnpublish with Internal while the
// task's file is in the target (a fake mounter's rmdir): a release
// started on Nomad's "ready" shows as such a call.
func TestNomadLostNodeBack(t *testing.T) {
	e := newNomadEnv(t, nomadEnvOptions{timeout: 4 * time.Minute, nodes: []string{"n1", "n2"}, fastNodeLoss: true})
	n2, err := e.nomad.StartClient(e.ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n2.Stop)
	t.Cleanup(n2.Resume) // before Stop: a stopped process ignores SIGTERM
	e.volume("vol3", "disk-2")
	a, _ := e.runService("n2", "vol3", e.jobVarsOn("n2", "vol3", "node=n2", "shutdown_delay=0s"))

	n2.Pause()
	if err := Poll(e.ctx, 50*time.Millisecond, func() (bool, error) {
		return e.schedulerStatus()["held"].(float64) == 1, nil
	}); err != nil {
		t.Fatalf("the lost allocation is not held: %v", err)
	}
	n2.Resume()
	if err := n2.WaitReady(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.waitReleased("vol3")
	got, err := e.nomad.Alloc(e.ctx, a.ID)
	if err != nil || !got.Terminal() || got.ClientStatus == "lost" {
		t.Fatalf("the claim was released before the client reported the allocation ended: %+v %v", got, err)
	}
	mustContain(t, "alloc status", e.cli(0, "alloc", "status", a.ID), "complete")
	var unpublish []string
	for _, c := range e.calls() {
		if strings.HasPrefix(c, "n2:NodeUnpublishVolume") {
			unpublish = append(unpublish, c)
		}
	}
	if len(unpublish) != 1 || !strings.HasSuffix(unpublish[0], ":OK") {
		t.Fatalf("NodeUnpublish on n2 %v, want one, after the task stopped", unpublish)
	}
	mustContain(t, "events", e.cli(0, "events", "-type", "scheduler"), "its node is back")
}

// runBatch runs the batch example on vol and waits for its release; it
// returns the allocation.
func (e *nomadEnv) runBatch(vol string, seen map[string]bool) NomadAlloc {
	e.t.Helper()
	e.run(append(append([]string{"job", "run", "-detach"}, e.jobVars(vol)...), example("batch-write.nomad.hcl"))...)
	a, err := e.nomad.WaitAlloc(e.ctx, "volhost-batch", seen)
	if err != nil {
		e.t.Fatal(err)
	}
	seen[a.ID] = true
	if err := Poll(e.ctx, 20*time.Millisecond, func() (bool, error) {
		got, err := e.nomad.Alloc(e.ctx, a.ID)
		a = got
		return err == nil && got.Terminal(), nil
	}); err != nil {
		e.t.Fatal(err)
	}
	e.waitReleased(vol)
	mustContain(e.t, "alloc status", e.cli(0, "alloc", "status", a.ID), "complete")
	return a
}

// TestNomadRestart: Nomad goes away (one event and a status line, the
// bridge retrying), comes back with its state wiped (a dev agent: its
// index starts again), and the bridge reconnects, counts the reset and
// mirrors what Nomad does next.
func TestNomadRestart(t *testing.T) {
	e := newNomadEnv(t, nomadEnvOptions{timeout: 3 * time.Minute})
	e.volume("vol1", "disk-0")
	seen := map[string]bool{}
	e.runBatch("vol1", seen)
	before := e.schedulerStatus()["index"].(float64)
	// The web UI's scheduler page, loaded once, follows the whole outage.
	b := newBrowser(t, e.agent.Addr)
	b.open("/ui/scheduler", `section[data-source="nomad"][data-state="streaming"][data-connected="true"]`)
	eval[bool](b, `window.__sameDocument = true`)
	e.uiMatchesStatus(b)
	b.shot("scheduler")

	e.nomad.Stop()
	if err := Poll(e.ctx, 50*time.Millisecond, func() (bool, error) {
		st := e.schedulerStatus()
		msg, _ := st["last_error"].(string)
		return st["state"] == "retrying" && strings.Contains(msg, "connection refused"), nil
	}); err != nil {
		t.Fatalf("the bridge does not say Nomad is gone: %v", err)
	}
	// A few retries (backoff 1s, 2s: retry_max) go by.
	if err := Poll(e.ctx, 100*time.Millisecond, func() (bool, error) {
		return e.schedulerStatus()["failures"].(float64) >= 4, nil
	}); err != nil {
		t.Fatal(err)
	}
	b.run(visible(`section[data-source="nomad"][data-state="retrying"][data-connected="false"]`))
	if got := b.text(`section[data-source="nomad"] [data-field="last-error"]`); !strings.Contains(got, "connection refused") {
		t.Fatalf("the scheduler page's last error %q does not say Nomad refused the connection", got)
	}
	eval[bool](b, inPage(`section[data-source="nomad"] [data-field="failures"]`, `if (Number(e.innerText) >= 4) resolve(true); else setTimeout(look, 20)`))
	b.shot("scheduler-retrying")
	if err := e.nomad.Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := Poll(e.ctx, 100*time.Millisecond, func() (bool, error) {
		st := e.schedulerStatus()
		return st["state"] == "streaming" && st["last_error"] == nil && st["resets"].(float64) == 1, nil
	}); err != nil {
		t.Fatalf("the bridge did not reconnect and count the reset: %v; status %v", err, e.schedulerStatus())
	}
	if after := e.schedulerStatus()["index"].(float64); after >= before {
		t.Fatalf("the cursor did not follow Nomad's reset: %v before, %v after", before, after)
	}
	b.run(visible(`section[data-source="nomad"][data-state="streaming"][data-connected="true"]`))
	e.uiMatchesStatus(b)
	if !eval[bool](b, `window.__sameDocument === true`) {
		t.Fatal("the scheduler page reloaded: it should update in place")
	}
	events := e.cli(0, "events", "-type", "scheduler")
	mustContain(t, "events", events, "went back from", "connected to "+e.nomad.Addr+" again")
	if n := strings.Count(events, "connection refused"); n != 1 {
		t.Fatalf("%d events for the unreachable Nomad, want 1:\n%s", n, events)
	}
	// And it mirrors the new Nomad.
	e.volume("vol2", "disk-1")
	e.runBatch("vol2", seen)
}

// TestNomadLeaderFailover: three volhost servers mirror Nomad; the leader
// is killed (SIGKILL) while an allocation holds a volume. While no server
// leads, Nomad stops that allocation and places another that declares a
// volume. The new leader resumes from the index committed in volhost's
// state, re-lists, and releases the stopped allocation's claim and
// claims, publishes and releases the new one's: every volume published
// and unpublished exactly once, none missed.
func TestNomadLeaderFailover(t *testing.T) {
	bin, err := NomadBin()
	if err != nil {
		t.Skipf("the Nomad scenarios need a Nomad %s binary: %v", NomadVersion, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	ndir, err := os.MkdirTemp("", "vhn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ndir) })
	nm, err := StartNomad(ctx, ndir, bin, "n1", NomadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nomad log tail:\n%s", nm.Tail(4000))
		}
		nm.Stop()
		KillByDir(dir)
	})
	drv := startDriver(ctx, t, dir, GCEPDOptions{Nodes: []string{"n1"}, Disks: 4})
	cl, err := StartCluster(ctx, dir, bins.Volhost, 3, fmt.Sprintf(`log_level = "debug"
%s
scheduler "nomad" {
  address         = %q
  relist_interval = "5s"
  retry_max       = "2s"
}
`, defaultWatcher, nm.Addr))
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cl)
	cl.CLI(ctx, t, "plugin", "register", writeSpec(t, dir, "plugin.hcl", fmt.Sprintf("plugin %q {\n  controller_endpoint = %q\n}\n", defaultPlugin, Endpoint(drv.Controller))))
	root := filepath.Join(dir, "root-n1")
	cl.CLI(ctx, t, "node", "register", writeSpec(t, dir, "n1.hcl", fmt.Sprintf("node \"n1\" {\n  status = \"ready\"\n  root_dir = %q\n  plugin %q {\n    endpoint = %q\n  }\n}\n",
		root, defaultPlugin, Endpoint(drv.Nodes["n1"]))))
	for i, vol := range []string{"vol1", "vol2", "vol3"} {
		cl.CLI(ctx, t, "volume", "register", writeSpec(t, dir, vol+".hcl", fmt.Sprintf("volume %q {\n  external_id = %q\n  plugin_id = %q\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n",
			vol, drv.VolumeID(fmt.Sprintf("disk-%d", i)), defaultPlugin)))
	}
	nomad := func(args ...string) {
		t.Helper()
		if _, err := nm.CLI(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	vars := func(vol string, more ...string) []string {
		out := []string{"-var", "root_dir=" + root, "-var", "plugin=" + defaultPlugin, "-var", "volume=" + vol, "-var", "cleanup=true"}
		for _, m := range more {
			out = append(out, "-var", m)
		}
		return out
	}
	waitClaims := func(vol string, cond func(map[string]*Claim) bool) {
		t.Helper()
		var last *Volume
		err := Poll(ctx, 20*time.Millisecond, func() (bool, error) {
			s, err := cl.WaitLeader(ctx, nil)
			if err != nil {
				return false, err
			}
			v, _, err := s.API.Volume(ctx, vol, 0, 0)
			if err != nil {
				return false, nil
			}
			last = v
			return cond(v.Claims), nil
		})
		if err != nil {
			t.Fatalf("waiting on %s: %v (last %+v)", vol, err, last)
		}
	}
	released := func(c map[string]*Claim) bool { return len(c) == 0 }

	// Before the failover: a batch job's claim made and released.
	nomad(append(append([]string{"job", "run", "-detach"}, vars("vol1")...), example("batch-write.nomad.hcl"))...)
	a, err := nm.WaitAlloc(ctx, "volhost-batch", nil)
	if err != nil {
		t.Fatal(err)
	}
	waitClaims("vol1", func(c map[string]*Claim) bool { return c[a.ID] != nil })
	waitClaims("vol1", released)
	// A service job holds vol2.
	nomad(append(append([]string{"job", "run", "-detach"}, vars("vol2", "shutdown_delay=0s")...), example("service-delay.nomad.hcl"))...)
	b, err := nm.WaitAlloc(ctx, "volhost-service", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Taken, not only recorded: the claim path writes its record before its
	// first CSI call, and a leader killed mid-publish leaves a publishing
	// claim the new leader releases without ever staging it.
	waitClaims("vol2", func(c map[string]*Claim) bool { return c[b.ID] != nil && c[b.ID].State == "taken" })

	leader, err := cl.WaitLeader(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	leader.KillNow()
	// While no server leads: b is stopped, c placed.
	nomad("job", "stop", "-detach", "volhost-service")
	nomad(append(append([]string{"job", "run", "-detach"}, vars("vol3")...), example("batch-write.nomad.hcl"))...)
	c, err := nm.WaitAlloc(ctx, "volhost-batch", map[string]bool{a.ID: true})
	if err != nil {
		t.Fatal(err)
	}
	next, err := cl.WaitLeader(ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s killed, %s leads", leader.ID, next.ID)
	waitClaims("vol2", released)
	// c's claim may come and go while vol2 is released (the batch task
	// writes once and ends): its trace is the driver's detach of disk-2.
	if err := Poll(ctx, 20*time.Millisecond, func() (bool, error) {
		calls, err := drv.Control.Calls(ctx)
		if err != nil {
			return false, nil
		}
		for _, call := range calls.Calls {
			if call.VolumeID == drv.VolumeID("disk-2") && call.Method == "ControllerUnpublishVolume" && call.Code == "OK" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("vol3 was never published and released for %s: %v", c.ID, err)
	}
	waitClaims("vol3", released)
	if got, err := nm.Alloc(ctx, c.ID); err != nil || got.ClientStatus != "complete" {
		t.Fatalf("allocation %s placed during the failover: %+v %v", c.ID, got, err)
	}
	calls, err := drv.Control.Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		disk := drv.VolumeID(fmt.Sprintf("disk-%d", i))
		n := map[string]int{}
		for _, call := range calls.Calls {
			if call.VolumeID == disk && call.Code == "OK" {
				n[call.Method]++
			}
		}
		for _, m := range []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"} {
			if n[m] != 1 {
				t.Errorf("disk-%d: %s succeeded %d times, want once (calls %v)", i, m, n[m], n)
			}
		}
	}
	out := cl.CLI(ctx, t, "scheduler", "status")
	mustContain(t, "scheduler status", out, "streaming", "Last error   = -")
}

// TestNomadBadInput: a job naming a volume volhost does not know, and a
// job whose volume another allocation holds for writing: one event and one
// status line each, the bridge keeps mirroring everything else, and the
// refused claim is made once the volume is free (nothing lost).
func TestNomadBadInput(t *testing.T) {
	e := newNomadEnv(t, nomadEnvOptions{timeout: 3 * time.Minute})
	e.volume("vol1", "disk-0")
	problems := func() string {
		st := e.schedulerStatus()
		var lines []string
		ps, _ := st["problems"].([]any) // omitted when none
		for _, p := range ps {
			lines = append(lines, p.(map[string]any)["message"].(string))
		}
		return strings.Join(lines, "\n")
	}
	waitProblem := func(want string) {
		t.Helper()
		if err := Poll(e.ctx, 50*time.Millisecond, func() (bool, error) { return strings.Contains(problems(), want), nil }); err != nil {
			t.Fatalf("no problem line saying %q: %v\n%s", want, err, problems())
		}
	}

	// An unknown volume.
	e.run(append(append([]string{"job", "run", "-detach"}, e.jobVars("nope")...), example("batch-write.nomad.hcl"))...)
	waitProblem("volume default/nope is not registered in volhost")

	// vol1 held by a service; a batch job wants it too.
	e.run(append(append([]string{"job", "run", "-detach"}, e.jobVars("vol1", "shutdown_delay=0s")...), example("service-delay.nomad.hcl"))...)
	svc, err := e.nomad.WaitAlloc(e.ctx, "volhost-service", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.agent.API.WaitVolume(e.ctx, "vol1", func(v *Volume) bool { return v.Claims[svc.ID] != nil }); err != nil {
		t.Fatal(err)
	}
	as, err := e.nomad.JobAllocs(e.ctx, "volhost-batch")
	if err != nil {
		t.Fatal(err)
	}
	skip := map[string]bool{}
	for _, a := range as {
		skip[a.ID] = true
	}
	e.run(append(append([]string{"job", "run", "-detach"}, e.jobVars("vol1")...), example("batch-write.nomad.hcl"))...)
	batch, err := e.nomad.WaitAlloc(e.ctx, "volhost-batch", skip)
	if err != nil {
		t.Fatal(err)
	}
	waitProblem("hold its write claim")
	events := e.cli(0, "events", "-type", "scheduler")
	if n := strings.Count(events, "hold its write claim"); n != 1 {
		t.Fatalf("%d events for the refused claim, want 1:\n%s", n, events)
	}
	mustContain(t, "events", events, "default/nope is not registered")
	// (The nope allocation was stopped by the job's update: its problem
	// line went with it; its event stays.)
	mustContain(t, "scheduler status", e.cli(0, "scheduler", "status"), "hold its write claim", "streaming")
	// The web UI's scheduler page shows the same problem line, and drops
	// it without a reload once the claim is made.
	b := newBrowser(t, e.agent.Addr)
	row := fmt.Sprintf(`#problems-nomad tr[data-key="alloc/%s/volume/default/vol1"]`, batch.ID)
	b.open("/ui/scheduler", row)
	if got := b.text(row); !strings.Contains(got, "hold its write claim") || !strings.Contains(got, batch.ID) {
		t.Fatalf("the scheduler page's problem line %q does not name the allocation and the refusal", got)
	}
	eval[bool](b, `window.__sameDocument = true`)
	b.shot("scheduler-problems")

	// The service stops: the next re-list claims vol1 for the batch
	// allocation, whose task was waiting for it; it writes and ends.
	e.run("job", "stop", "-detach", "volhost-service")
	if err := Poll(e.ctx, 50*time.Millisecond, func() (bool, error) {
		got, err := e.nomad.Alloc(e.ctx, batch.ID)
		return err == nil && got.Terminal(), nil
	}); err != nil {
		t.Fatal(err)
	}
	e.waitReleased("vol1")
	if got, _ := e.nomad.Alloc(e.ctx, batch.ID); got.ClientStatus != "complete" {
		t.Fatalf("the batch allocation that waited for vol1 is %s", got.ClientStatus)
	}
	if logs := e.run("alloc", "logs", batch.ID); !strings.Contains(logs, "written by allocation "+batch.ID) {
		t.Fatalf("the waiting task never wrote:\n%s", logs)
	}
	if strings.Contains(problems(), "hold its write claim") {
		t.Fatalf("the refusal's problem line outlived it:\n%s", problems())
	}
	b.run(chromedp.WaitNotPresent(chromedp.CSS(row)))
	if !eval[bool](b, `window.__sameDocument === true`) {
		t.Fatal("the scheduler page reloaded: it should update in place")
	}
}

// num prints a JSON number as an integer.
func num(v any) string {
	f, _ := v.(float64)
	return strconv.FormatInt(int64(f), 10)
}

// uiMatchesStatus waits until the web UI's scheduler page (open in b)
// shows what `volhost scheduler status -json` answers: source, address,
// connection, cursor, resets, failures, claims. The page refreshes every
// few seconds and the cursor may move meanwhile: both are read again
// until one refresh agrees.
func (e *nomadEnv) uiMatchesStatus(b *browser) {
	e.t.Helper()
	var last string
	err := Poll(e.ctx, 100*time.Millisecond, func() (bool, error) {
		st := e.schedulerStatus()
		want := map[string]string{
			"source": "nomad", "address": e.nomad.Addr, "state": st["state"].(string),
			"index": num(st["index"]), "resets": num(st["resets"]), "failures": num(st["failures"]), "claims": num(st["claims"]),
		}
		if st["state"] == "streaming" {
			want["connected"] = "yes"
		} else {
			want["connected"] = "no"
		}
		got := eval[map[string]string](b, `Object.fromEntries([...document.querySelectorAll('section[data-source="nomad"] [data-field]')].map((d) => [d.dataset.field, d.innerText.trim()]))`)
		last = fmt.Sprintf("page %v, status %v", got, want)
		for k, v := range want {
			if got[k] != v {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("the scheduler page never agreed with the status: %v; last %s", err, last)
	}
}
