package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/volhost/volhost/test/peers/internal/fault"
)

// The web UI's browser tests: Debian's chromium driven by
// chromedp against the real agent with the GCE PD driver.

// ChromiumEnv overrides the browser binary (default /usr/bin/chromium,
// Debian's chromium package; .ci/run installs it).
const ChromiumEnv = "VOLHOST_E2E_CHROMIUM"

// ShotsEnv names the directory the page screenshots go to (make e2e:
// bin/ui); without it they go to a temporary directory.
const ShotsEnv = "VOLHOST_E2E_UI_SHOTS"

type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string

	mu         sync.Mutex
	exceptions []string // uncaught exceptions of the pages
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	exe := os.Getenv(ChromiumEnv)
	if exe == "" {
		exe = "/usr/bin/chromium"
	}
	if _, err := os.Stat(exe); err != nil {
		t.Fatalf("the UI tests need Debian's chromium (apt-get install -y chromium, or set %s): %v", ChromiumEnv, err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(exe),
		chromedp.WindowSize(1280, 800),
		chromedp.NoSandbox, // CI runs as root, where chromium's sandbox cannot start
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, base: base, shots: os.Getenv(ShotsEnv)}
	if b.shots == "" {
		b.shots = filepath.Join(os.TempDir(), "volhost-ui-shots")
	}
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	// Start the browser now, so its start-up is not part of a page's time.
	// This first call must not carry a deadline: the browser lives as
	// long as the context of the first call (the test's timeout bounds it).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("starting %s: %v", exe, err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() { // owned by ctx: ends when the cleanup cancels it
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException {
				b.mu.Lock()
				b.exceptions = append(b.exceptions, fmt.Sprintf("%s (%s:%d)", m.Text, m.URL, m.Line))
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		<-done
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.exceptions {
			t.Errorf("uncaught exception in the UI: %s", e)
		}
	})
	return b
}

// run runs steps with a deadline: every wait of these tests is a chromedp
// wait-for bounded by it, never a sleep.
func (b *browser) run(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v\nthe page is:\n%s", err, b.mainHTML())
	}
}

func (b *browser) mainHTML() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
	return html
}

// get runs one action that returns a value.
func get[T any](b *browser, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %v\nmain is:\n%s", err, b.mainHTML())
	}
	return v
}

func eval[T any](b *browser, js string) T {
	b.t.Helper()
	return get(b, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// text reads the text of the first visible element matching sel (CSS),
// waiting for one, in a single in-page evaluation. The live pages redraw
// while a test reads them, and chromedp.Text finds the node in one call
// and reads it in a second: a redraw in between failed a CI run with "No
// node with given id found".
func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, inPage(sel, `resolve(e.innerText)`))
}

// inPage returns a script that waits (until the caller's deadline) for a
// visible element matching sel, then runs then with it bound to e.
func inPage(sel, then string) string {
	q, _ := json.Marshal(sel) // a JSON string is a JavaScript string literal
	return fmt.Sprintf(`new Promise((resolve) => {
  const look = () => {
    const e = document.querySelector(%s);
    if (e && e.checkVisibility()) { %s; } else setTimeout(look, 20);
  };
  look();
})`, q, then)
}

// open loads a UI page and waits for sel (CSS).
func (b *browser) open(path, sel string) {
	b.t.Helper()
	b.run(chromedp.Navigate(b.base+path), visible(sel))
}

func visible(css string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(css))
}

func (b *browser) shot(name string) {
	b.t.Helper()
	png := get(b, chromedp.FullScreenshot(100)) // quality 100: PNG
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
}

// withModules returns a module directory holding the named modules: a
// working example from the plugin build (make plugins), else a
// deliberately faulty one from the test-module build (make test-modules).
func withModules(t *testing.T, names ...string) string {
	t.Helper()
	root := ""
	builds := []string{os.Getenv("VOLHOST_E2E_PLUGIN_BUILD"), os.Getenv("VOLHOST_E2E_TEST_MODULES")}
	if builds[0] == "" || builds[1] == "" {
		peers, err := goOutput(context.Background(), "", "list", "-m", "-f", "{{.Dir}}", "github.com/volhost/volhost/test/peers")
		if err != nil {
			t.Fatal(err)
		}
		root = filepath.Join(peers, "..", "..")
	}
	if builds[0] == "" {
		builds[0] = filepath.Join(root, "examples", "plugins", "build")
	}
	if builds[1] == "" {
		builds[1] = filepath.Join(root, "bin", "test-modules")
	}
	dir := t.TempDir()
	for _, n := range names {
		build := builds[0]
		if _, err := os.Stat(filepath.Join(build, n+".wasm")); err != nil {
			build = builds[1]
		}
		for _, ext := range []string{".wasm", ".hcl"} {
			b, err := os.ReadFile(filepath.Join(build, n+ext))
			if err != nil {
				t.Fatalf("module %s is not built (make plugins test-modules): %v", n, err)
			}
			if err := os.WriteFile(filepath.Join(dir, n+ext), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// TestUIPages loads every page against a real agent and GCE PD driver:
// a release seen moving through its states on the volume page without a
// reload, a force deregister through the UI that shows its leftover, a
// refused module's reason, a live event feed, and the volumes list at
// 10,000 volumes (first-page render times logged for BENCHMARKS.md).
// Along the way, what a new operator found rough: relative times that
// never moved, a grace hold's duplicate events, chart labels clipped or
// run together, module names broken over lines and an empty Rollout
// column, volume IDs without their namespace in the event feed, no plain
// deregister for a free volume, a force dialog without the external
// volume ID and a red 404 box on a deregistered volume's page.
func TestUIPages(t *testing.T) {
	modDir := withModules(t, "default-policy", "fault-version", "grace-policy")
	e := newEnv(t, envOptions{disks: 6, agentArgs: []string{"-module-dir", modDir}})
	b := newBrowser(t, e.agent.Addr)

	b.open("/ui/", "#count-volumes")
	if got := b.text("#count-volumes"); got != "0" {
		t.Fatalf("overview volume count %q, want 0 before any volume", got)
	}

	// A release watched live: the page is loaded once and never again.
	e.claim("vol1", "disk-1", "web-1", "node1")
	b.open("/ui/volume?namespace=default&id=vol1", `#claims-table tr[data-alloc="web-1"][data-state="taken"]`)
	eval[bool](b, `window.__sameDocument = true`)
	if err := e.drv.Control.ResetCalls(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.drv.Control.Fault(e.ctx, fault.Rule{Method: "ControllerUnpublishVolume", Hang: "10m", Count: 1}); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-1")
	e.waitStarted("ControllerUnpublishVolume")
	b.run(visible(`#claims-table tr[data-alloc="web-1"][data-state="node-detached"] li.current`))
	b.shot("volume-releasing")
	if err := e.drv.Control.ClearFaults(e.ctx); err != nil {
		t.Fatal(err)
	}
	b.run(chromedp.WaitVisible(`//ol[@class="timeline"]/li[contains(., "released and removed")]`),
		chromedp.WaitNotPresent(chromedp.CSS(`#claims-table tr[data-alloc="web-1"]`)))
	if !eval[bool](b, `window.__sameDocument === true`) {
		t.Fatal("the volume page reloaded during the release: it should update in place")
	}
	timeline := b.text("#timeline")
	for _, want := range []string{"claim taken", "taken -> node-detached", "node-detached -> controller-detached", "controller-detached -> ready-to-free"} {
		if !strings.Contains(timeline, want) {
			t.Fatalf("timeline lacks %q:\n%s", want, timeline)
		}
	}

	// A release that keeps failing shows the CSI code; force deregister
	// through the UI records the claim as a leftover.
	e.claim("vol2", "disk-2", "web-2", "node1")
	if err := e.drv.Control.Fault(e.ctx, fault.Rule{Method: "NodeUnpublishVolume", Code: "Internal"}); err != nil {
		t.Fatal(err)
	}
	e.cli(0, "alloc", "update", "-status", "complete", "web-2")
	b.open("/ui/volume?namespace=default&id=vol2", `#claims-table tr[data-alloc="web-2"] td.last-error strong`)
	if got := b.text(`#claims-table tr[data-alloc="web-2"] td.last-error`); !strings.Contains(got, "Internal") {
		t.Fatalf("last error %q does not name the CSI code Internal", got)
	}
	b.run(chromedp.WaitEnabled(chromedp.CSS(`#force-deregister`)))
	b.shot("volume")
	// An operator who tabbed to the button keeps it through the redraws
	// of a release that keeps failing: each attempt moves the volume's
	// index and the page redraws in place, keeping the nodes it still shows.
	attempts := `#claims-table tr[data-alloc="web-2"] td:nth-child(5)`
	before := b.text(attempts)
	eval[bool](b, `(window.__button = document.querySelector("#force-deregister")).focus(), true`)
	was, _ := json.Marshal(before)
	eval[bool](b, inPage(attempts, fmt.Sprintf(`if (e.innerText !== %s) resolve(true); else setTimeout(look, 20)`, was)))
	if !eval[bool](b, `document.activeElement === window.__button && window.__button.isConnected`) {
		t.Fatalf("a redraw (attempts %s -> %s) took the focus off the force deregister button: the page should update in place", before, b.text(attempts))
	}
	b.run(chromedp.Click(chromedp.CSS(`#force-deregister`)),
		visible(`#confirm-leftovers`))
	if got := b.text(`#confirm-leftovers`); !strings.Contains(got, "web-2") || !strings.Contains(got, "node1") {
		t.Fatalf("the confirmation does not show the leftover it will record: %q", got)
	}
	if got := b.text(`#confirm-external`); !strings.Contains(got, e.drv.VolumeID("disk-2")) {
		t.Fatalf("the force deregister confirmation does not name the external volume %s: %q", e.drv.VolumeID("disk-2"), got)
	}
	b.shot("volume-force-confirm")
	b.run(chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		visible(`#deregistered`),
		visible(`#leftovers tr[data-leftover="default/vol2/web-2"]`))
	left, err := e.agent.API.Leftovers(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(left, func(l Leftover) bool { return l.VolumeID == "vol2" && l.AllocID == "web-2" && l.NodeID == "node1" }) {
		t.Fatalf("the API lists no leftover for vol2/web-2 after the UI's force deregister: %+v", left)
	}
	if err := e.drv.Control.ClearFaults(e.ctx); err != nil {
		t.Fatal(err)
	}
	// Opened again (from an event's link, say), the forced volume's page
	// says it is not registered and shows its timeline: no error box.
	b.open("/ui/volume?namespace=default&id=vol2", `#not-registered`)
	b.run(chromedp.WaitVisible(`//ol[@class="timeline"]/li[@data-type="force-deregister"]`))
	if got := eval[string](b, `Array.from(document.querySelectorAll("main .error")).map((e) => e.innerText).join("; ")`); got != "" {
		t.Fatalf("the deregistered volume's page shows an error: %q", got)
	}
	b.shot("volume-deregistered")

	// A free volume is deregistered, not force-deregistered: the page
	// offers Deregister (no force button) and the dialog names the disk.
	e.cli(0, "volume", "register", e.spec("free1.hcl", fmt.Sprintf(`
volume "free1" {
  external_id     = %q
  plugin_id       = %q
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`, e.drv.VolumeID("disk-5"), e.plugin)))
	b.open("/ui/volume?namespace=default&id=free1", `#deregister:enabled`)
	if eval[bool](b, `document.querySelector("#force-deregister") !== null`) {
		t.Error("a volume without claims offers Force deregister")
	}
	b.run(chromedp.Click(chromedp.CSS(`#deregister`)), visible(`#confirm-ok`))
	if got := b.text(`#confirm-body`); !strings.Contains(got, e.drv.VolumeID("disk-5")) {
		t.Fatalf("the deregister confirmation does not name the external volume: %q", got)
	}
	b.run(chromedp.Click(chromedp.CSS(`#confirm-ok`)), visible(`#deregistered`))
	if _, code, _ := e.agent.CLI(e.ctx, "volume", "status", "free1"); code == 0 {
		t.Fatal("free1 is still registered after the UI's deregister")
	}

	// A claim the grace policy holds: its reason names no age that goes
	// stale ("1ms ago" for good), its since and until count on by
	// themselves with the page not redrawn, and the hold is one event.
	e.cli(0, "volume", "register", e.spec("gvol.hcl", fmt.Sprintf(`
volume "gvol" {
  namespace       = "batch"
  external_id     = %q
  plugin_id       = %q
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`, e.drv.VolumeID("disk-4"), e.plugin)))
	e.cli(0, "alloc", "register", e.spec("batch-1.hcl", "alloc \"batch-1\" {\n  namespace = \"batch\"\n  node_id = \"node1\"\n  job_id = \"job-batch\"\n  client_status = \"running\"\n}\n"))
	e.cli(0, "volume", "claim", "-namespace", "batch", "-alloc", "batch-1", "-node", "node1", "-mode", "write", "gvol")
	e.cli(0, "alloc", "update", "-status", "complete", "batch-1")
	b.open("/ui/volume?namespace=batch&id=gvol", `#claims-table tr[data-alloc="batch-1"] td.hold time.rel`)
	hold := b.text(`#claims-table tr[data-alloc="batch-1"] td.hold`)
	if !strings.Contains(hold, "grace-policy") || regexp.MustCompile(`\d+(\.\d+)?(ms|s|m) ago, grace`).MatchString(hold) {
		t.Fatalf("hold cell %q: want the grace policy's hold without an age in its reason", hold)
	}
	// The texts of the hold's times change while the page's render count
	// stays: the ticker moved them, not a redraw (a redraw resets the wait).
	eval[bool](b, inPage(`#claims-table tr[data-alloc="batch-1"] td.hold .sub`, `
    const main = document.getElementById("main");
    const start = [e.innerText, main.dataset.rendered];
    const poll = () => {
      const now = document.querySelector('#claims-table tr[data-alloc="batch-1"] td.hold .sub');
      if (!now) return setTimeout(poll, 50);
      if (main.dataset.rendered !== start[1]) { start[0] = now.innerText; start[1] = main.dataset.rendered; }
      else if (now.innerText !== start[0]) return resolve(true);
      setTimeout(poll, 50);
    };
    poll()`))
	b.shot("volume-held")
	held := e.cli(0, "events", "-volume", "gvol", "-namespace", "batch", "-type", "claim-held")
	if n := strings.Count(held, "claim held at"); n != 1 {
		t.Fatalf("the grace hold was recorded %d times, want once:\n%s", n, held)
	}

	// The refused module says why.
	b.open("/ui/modules", `#modules-table tr[data-module="fault-version"][data-state="refused"] .refusal`)
	if got := b.text(`#modules-table tr[data-module="fault-version"] .refusal`); !strings.Contains(got, "99") {
		t.Fatalf("refusal of fault-version %q does not name its ABI version 99", got)
	}
	b.run(visible(`#modules-table tr[data-module="default-policy"][data-state="serving"]`))
	// Every module's name on one line, and a Rollout cell that says
	// something for every module, candidate or not.
	if bad := eval[string](b, `Array.from(document.querySelectorAll("#modules-table tbody tr")).flatMap((r) => {
    const out = [];
    const name = r.querySelector(".module-name");
    if (!name || name.getClientRects().length !== 1) out.push(r.dataset.module + ": name over " + (name ? name.getClientRects().length : 0) + " lines");
    const ro = r.querySelector("td.rollout");
    if (!ro || !ro.innerText.trim()) out.push(r.dataset.module + ": empty Rollout cell");
    return out;
  }).join("; ")`); bad != "" {
		t.Fatalf("modules table: %s", bad)
	}
	if got := b.text(`#modules-table tr[data-module="default-policy"] td.rollout`); !strings.Contains(got, "no candidate") {
		t.Fatalf("default-policy's Rollout cell %q does not say it has no candidate", got)
	}
	b.shot("modules")

	// An agent listens before its modules are compiled: while one is
	// loading the page says so and asks again by itself, until it serves.
	// The agent's answers are made to read "loading" twice (the fetch
	// wrapper below), then go through as they are.
	eval[bool](b, `(() => {
    const real = window.fetch;
    let left = 2;
    window.fetch = async (url, init) => {
      const resp = await real(url, init);
      if (left <= 0 || new URL(url, location.href).pathname !== "/v1/modules") return resp;
      left--;
      const body = await resp.json();
      for (const m of body.modules) if (m.name === "default-policy") Object.assign(m, {state: "loading", kind: "", version: "", generation: 0});
      return new Response(JSON.stringify(body), {status: resp.status, headers: resp.headers});
    };
    return true;
  })()`)
	b.run(chromedp.Click(chromedp.CSS(`a[data-nav="modules"]`)),
		visible(`#modules-loading`),
		visible(`#modules-table tr[data-module="default-policy"][data-state="loading"] .badge.loading`))
	if got := b.text(`#modules-loading`); !strings.Contains(got, "1 of 3 module(s) loading") || !strings.Contains(got, "releases nothing") {
		t.Fatalf("the loading note %q does not count the loading modules and say the leader waits", got)
	}
	b.run(visible(`#modules-table tr[data-module="default-policy"][data-state="serving"]`),
		chromedp.WaitNotPresent(chromedp.CSS(`#modules-loading`)))

	// Module rollout through the UI: a shadow candidate's agreement
	// shows, Promote makes it serve, Roll back returns to the last known
	// good generation.
	e.cli(0, "module", "shadow", "default-policy", filepath.Join(modDir, "default-policy.wasm"))
	b.open("/ui/modules", `#modules-table tr[data-module="default-policy"] button[data-action="promote"]`)
	if got := b.text(`#modules-table tr[data-module="default-policy"] .shadow`); !strings.Contains(got, "%") {
		t.Fatalf("shadow agreement cell %q shows no agreement", got)
	}
	b.run(chromedp.Click(chromedp.CSS(`#modules-table tr[data-module="default-policy"] button[data-action="promote"]`)), visible(`#confirm-ok`))
	b.run(chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		visible(`#modules-table tr[data-module="default-policy"] button[data-action="rollback"]`))
	if out := e.cli(0, "module", "status", "default-policy"); !regexp.MustCompile(`Promoted\s+=\s+true`).MatchString(out) {
		t.Fatalf("module status after the UI's promote does not say promoted:\n%s", out)
	}
	b.run(chromedp.Click(chromedp.CSS(`#modules-table tr[data-module="default-policy"] button[data-action="rollback"]`)), visible(`#confirm-ok`))
	b.run(chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#modules-table tr[data-module="default-policy"] button[data-action="rollback"]`)))
	b.shot("modules-rollout")
	// Discard drops a candidate without promoting it.
	e.cli(0, "module", "shadow", "default-policy", filepath.Join(modDir, "default-policy.wasm"))
	b.open("/ui/modules", `#modules-table tr[data-module="default-policy"] button[data-action="discard"]`)
	b.run(chromedp.Click(chromedp.CSS(`#modules-table tr[data-module="default-policy"] button[data-action="discard"]`)), visible(`#confirm-ok`))
	b.run(chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#modules-table tr[data-module="default-policy"] button[data-action="discard"]`)))
	if out := e.cli(0, "module", "status", "default-policy"); regexp.MustCompile(`(?m)^Shadow\s+=\s+generation`).MatchString(out) {
		t.Fatalf("module status after the UI's discard still shows a candidate:\n%s", out)
	}

	// No scheduler block: the scheduler page says where allocations come
	// from (the Nomad scenarios check a source's page).
	b.open("/ui/scheduler", `#no-scheduler`)

	b.open("/ui/nodes", `#nodes-table tr[data-node="node1"]`)
	if got := b.text(`#nodes-table tr[data-node="node1"]`); !strings.Contains(got, "ready") || !strings.Contains(got, e.plugin) {
		t.Fatalf("node row %q lacks its status and plugin", got)
	}
	b.shot("nodes")

	// Fence through the UI: the confirmation asks for the
	// reason, the node shows fenced with it, the API records it; unfence
	// clears it.
	b.run(chromedp.Click(chromedp.CSS(`#nodes-table tr[data-node="node1"] button[data-action="fence"]`)), visible(`#confirm-reason`))
	b.run(chromedp.SendKeys(chromedp.CSS(`#confirm-reason`), "powered off in console"), chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		visible(`#nodes-table tr[data-node="node1"][data-fenced="true"] .fence-reason`))
	if got := b.text(`#nodes-table tr[data-node="node1"] .fence-reason`); !strings.Contains(got, "powered off in console") {
		t.Fatalf("fenced node shows reason %q", got)
	}
	if f, err := e.agent.API.NodeFence(e.ctx, "node1"); err != nil || f == nil || f.Reason != "powered off in console" {
		t.Fatalf("the API's fence of node1 after the UI's fence: %+v, %v", f, err)
	}
	b.shot("nodes-fenced")
	b.run(chromedp.Click(chromedp.CSS(`#nodes-table tr[data-node="node1"] button[data-action="unfence"]`)), visible(`#confirm-ok`))
	b.run(chromedp.Click(chromedp.CSS(`#confirm-ok`)), visible(`#nodes-table tr[data-node="node1"][data-fenced="false"]`))
	if f, err := e.agent.API.NodeFence(e.ctx, "node1"); err != nil || f != nil {
		t.Fatalf("node1 still fenced after the UI's unfence: %+v, %v", f, err)
	}

	// The event feed is live: a claim made after the page loaded appears.
	b.open("/ui/events", `#feed li`)
	b.run(chromedp.WaitVisible(`//p[@id="live"][starts-with(., "Live")]`))
	e.claim("vol3", "disk-3", "web-3", "node1")
	b.run(chromedp.WaitVisible(`//ol[@id="feed"]/li[contains(., "default/vol3")][contains(., "claim taken")]`))
	if got := b.text(`#feed li[data-type="claim-held"]`); !strings.Contains(got, "batch/gvol") {
		t.Fatalf("the feed's hold event %q does not name the volume's namespace", got)
	}
	b.shot("events")

	// 10,000 volumes: the list stays one page of the API.
	const bulk = 10000
	for i := 0; i < bulk; i += 1000 {
		vols := make([]VolumeSpec, 0, 1000)
		for j := i; j < i+1000; j++ {
			vols = append(vols, VolumeSpec{ID: fmt.Sprintf("bulk-%05d", j), Namespace: "default", ExternalID: fmt.Sprintf("projects/p/zones/z/disks/bulk-%05d", j),
				PluginID: e.plugin, AccessMode: "single-node-writer", AttachmentMode: "file-system"})
		}
		if err := e.agent.API.RegisterVolumes(e.ctx, vols); err != nil {
			t.Fatal(err)
		}
	}
	pages := []struct{ name, path, sel string }{
		{"volumes", "/ui/volumes", `#volumes-table tr[data-volume="bulk-00000"]`},
		{"volumes-search", "/ui/volumes?search=bulk-0999", `#volumes-table tr[data-volume="bulk-09999"]`},
		{"overview", "/ui/", `#count-volumes`},
	}
	times := map[string][]float64{}
	for round := 0; round < 5; round++ {
		for _, p := range pages {
			b.open(p.path, p.sel)
			times[p.name] = append(times[p.name], eval[float64](b, `Number(document.getElementById("main").dataset.firstRenderMs)`))
		}
	}
	for _, p := range pages {
		ts := slices.Clone(times[p.name])
		slices.Sort(ts)
		t.Logf("ui-render %s with %d volumes: median %.1f ms (min %.1f, max %.1f) over %d rounds, navigation start to data on screen",
			p.name, bulk+3, ts[len(ts)/2], ts[0], ts[len(ts)-1], len(ts))
	}
	if got := b.text("#count-volumes"); got != fmt.Sprint(bulk+3) {
		t.Fatalf("overview volume count %q, want %d", got, bulk+3)
	}
	// The charts' labels as drawn: inside their chart, none over another
	// (the last minute's label read "06:29 P", the latency buckets
	// "< 100ms< 500ms").
	b.run(visible(`svg.chart text`))
	if bad := eval[string](b, chartLabelProblems); bad != "" {
		t.Fatalf("chart labels: %s", bad)
	}
	b.shot("overview")
	b.open("/ui/volumes", `#volumes-table tr[data-volume="bulk-00000"]`)
	b.run(chromedp.Click(chromedp.CSS(`#next-page`)), visible(`#volumes-table tr[data-volume="bulk-00050"]`),
		visible(`#first-page`))
	b.open("/ui/volumes", `#volumes-table tr[data-volume="bulk-00000"]`)
	b.shot("volumes")

	// Readable on a narrow screen: the page does not scroll sideways.
	b.run(chromedp.EmulateViewport(390, 844), chromedp.Navigate(b.base+"/ui/"), visible("#count-volumes"))
	if eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
		t.Error("the overview scrolls sideways at 390 px wide")
	}
	b.shot("overview-narrow")
}

// chartLabelProblems lists, in the page, every chart label drawn outside
// its chart or over another label ("" when none).
const chartLabelProblems = `Array.from(document.querySelectorAll("svg.chart")).flatMap((svg) => {
  const box = svg.getBoundingClientRect();
  const name = svg.getAttribute("aria-label").split(":")[0];
  const texts = Array.from(svg.querySelectorAll("text")).map((t) => [t.textContent, t.getBoundingClientRect()]);
  const out = [];
  for (const [s, r] of texts) {
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5) out.push(name + ": " + JSON.stringify(s) + " leaves the chart");
  }
  texts.forEach(([s, r], i) => texts.slice(i + 1).forEach(([s2, r2]) => {
    if (r.left < r2.right && r2.left < r.right && r.top < r2.bottom && r2.top < r.bottom) out.push(name + ": " + JSON.stringify(s) + " over " + JSON.stringify(s2));
  }));
  return out;
}).join("; ")`

// TestUIReadOnlyToken: with ACL on the UI asks for a token, keeps it in
// the tab's sessionStorage (no cookie), and a read-only token sees the
// actions disabled; the API refuses the action from the page too.
func TestUIReadOnlyToken(t *testing.T) {
	e := newEnv(t, envOptions{acl: true})
	e.claim("vol1", "disk-1", "web-1", "node1")
	pol := e.spec("readonly.hcl", `namespace "default" {
  policy = "read"
}
node {
  policy = "read"
}
modules {
  policy = "read"
}
events {
  policy = "read"
}
operator {
  policy = "read"
}
`)
	e.cli(0, "acl", "policy", "apply", "readonly", pol)
	out := e.cli(0, "acl", "token", "create", "-name", "viewer", "-policy", "readonly")
	secret := ""
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "Secret ID" {
			secret = strings.TrimSpace(v)
		}
	}
	if secret == "" {
		t.Fatalf("no secret in the token create output:\n%s", out)
	}

	b := newBrowser(t, e.agent.Addr)
	b.open("/ui/", "#token-input")
	b.run(chromedp.SendKeys(chromedp.CSS("#token-input"), secret), chromedp.Click(chromedp.CSS(`form.signin button[type="submit"]`)),
		visible("#whoami"))
	if got := b.text("#whoami"); !strings.Contains(got, "viewer") {
		t.Fatalf("signed in as %q, want viewer", got)
	}
	stored, cookies := eval[string](b, `sessionStorage.getItem("volhost.token")`), eval[string](b, `document.cookie`)
	if stored != secret || cookies != "" {
		t.Fatalf("token kept as %q with cookies %q; want it in sessionStorage only", stored, cookies)
	}
	b.open("/ui/volume?namespace=default&id=vol1", `#claims-table tr[data-alloc="web-1"]`)
	b.run(visible(`#force-deregister[disabled]`))
	if got := b.text("#force-deregister"); !strings.Contains(got, "needs namespace:force-deregister") {
		t.Fatalf("the disabled button says %q, not which capability is missing", got)
	}
	b.run(visible(`button[data-node="node1"][disabled]`))
	b.shot("volume-readonly")
	// The page's own fetch with the token is refused by the API.
	status := eval[float64](b, `fetch("/v1/volume/vol1?force=true", {method: "DELETE", headers: {"X-Volhost-Token": sessionStorage.getItem("volhost.token")}}).then((r) => r.status)`)
	if status != 403 {
		t.Fatalf("force deregister from the page with the read-only token: HTTP %v, want 403", status)
	}
	b.open("/ui/modules", "#reload-modules[disabled]")
	b.open("/ui/nodes", `#nodes-table tr[data-node="node1"] button[disabled]`)
	if _, _, err := e.agent.API.Volume(e.ctx, "vol1", 0, 0); err != nil {
		t.Fatalf("vol1 after the refused deregister: %v", err)
	}
	// Signing out forgets the token: the UI asks again.
	b.run(chromedp.Click(`//button[text()="Sign out"]`), visible("#token-input"))
	if eval[bool](b, `sessionStorage.getItem("volhost.token") !== null`) {
		t.Fatal("sign out kept the token in sessionStorage")
	}
}
