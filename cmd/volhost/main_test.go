package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/api/apitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// cliEnv is a CLI pointed at a real API server over a real state store.
type cliEnv struct {
	t       *testing.T
	backend *apitest.StoreBackend
	addr    string
	env     map[string]string // more environment (VOLHOST_ADDR is addr)
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	b := apitest.NewStoreBackend()
	ts := apitest.Serve(t, b)
	return &cliEnv{t: t, backend: b, addr: ts.URL}
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs the CLI with VOLHOST_ADDR pointing at the test server.
func (e *cliEnv) run(args ...string) result {
	e.t.Helper()
	var out, errb bytes.Buffer
	env := func(k string) string {
		if k == "VOLHOST_ADDR" {
			return e.addr
		}
		return e.env[k]
	}
	code := Run(args, env, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// ok runs a command that must succeed and returns its stdout.
func (e *cliEnv) ok(args ...string) string {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("volhost %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// setup registers the walk-through's plugin, node, volume and allocation.
func (e *cliEnv) setup() {
	e.t.Helper()
	e.ok("plugin", "register", "testdata/plugin.hcl")
	e.ok("node", "register", "testdata/node.hcl")
	e.ok("volume", "register", "testdata/volume.hcl")
	e.ok("alloc", "register", "testdata/alloc.hcl")
}

func contains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// TestWalkthrough follows the README: register a plugin, a node, a
// volume; claim; finish the allocation; release the claim.
func TestWalkthrough(t *testing.T) {
	e := newCLIEnv(t)
	contains(t, "plugin register", e.ok("plugin", "register", "testdata/plugin.hcl"), `Registered plugin "gce-pd" (controller publish/unpublish: true)`)
	contains(t, "node register", e.ok("node", "register", "testdata/node.hcl"), `Registered node "node1" (ready, 1 plugin(s))`)
	reg := e.ok("volume", "register", "testdata/volume.hcl")
	contains(t, "volume register", reg, `Registered volume "vol1" in namespace "default"`)
	if strings.Contains(reg, "Index") {
		t.Errorf("volume register prints the log index (noise to an operator):\n%s", reg)
	}
	contains(t, "volume register json", e.ok("volume", "register", "testdata/volumes.json"),
		`Registered volume "vol2" in namespace "default"`, `Registered volume "vol3" in namespace "prod"`)
	contains(t, "alloc register", e.ok("alloc", "register", "testdata/alloc.hcl"), `Registered allocation "web-1" on node "node1" (running)`)

	contains(t, "claim", e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1"),
		`Volume "vol1" claimed by allocation "web-1" on node "node1" (write, state taken)`)

	list := e.ok("volume", "status")
	contains(t, "volume status", list, "ID", "vol1", "vol2", "vol3", "prod", "1 (1 taken)")
	detail := e.ok("volume", "status", "vol1")
	contains(t, "volume status vol1", detail, "External ID", "projects/demo/zones/us-central1-a/disks/vol1",
		"Write Allocs", "web-1", "refused: live allocation(s) web-1", "web-1     node1    write  taken  0")

	contains(t, "node status", e.ok("node", "status", "node1"), "External Node ID", "unix:///tmp/volhost-csi/node1.sock", "Probe")
	contains(t, "plugin status", e.ok("plugin", "status", "gce-pd"), "Volumes", "= 3")
	contains(t, "alloc status", e.ok("alloc", "status"), "web-1", "running")

	// Detach refuses while the allocation runs.
	r := e.run("volume", "detach", "vol1", "node1")
	if r.code != 1 || !strings.Contains(r.stderr, "still uses volume") {
		t.Errorf("detach with a live alloc: exit %d, stderr %q", r.code, r.stderr)
	}

	contains(t, "alloc update", e.ok("alloc", "update", "-status", "complete", "web-1"), `Allocation "web-1" is now complete`)
	contains(t, "status after alloc ends", e.ok("volume", "status", "vol1"), "allowed now")
	contains(t, "system gc", e.ok("system", "gc"), "Claim GC queued 1 volume(s)")
	contains(t, "detach", e.ok("volume", "detach", "vol1", "node1"), "1 of 1 claim(s) released", "ready-to-free")
	contains(t, "status after release", e.ok("volume", "status", "vol1"), "No claims", "Write Allocs     = -")
	contains(t, "events", e.ok("events"), "Index", "vol1")
	contains(t, "deregister", e.ok("volume", "deregister", "vol1"), `Deregistered volume "vol1"`)
	if r := e.run("volume", "status", "vol1"); r.code != 1 || r.stderr != "Error: volume \"default/vol1\" does not exist\n" {
		t.Errorf("status after deregister: exit %d stderr %q", r.code, r.stderr)
	}
}

func TestForceDeregisterAndLeftovers(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")

	// Refused while in use, and with force while the allocation is live.
	for _, args := range [][]string{{"volume", "deregister", "vol1"}, {"volume", "deregister", "-force", "vol1"}} {
		r := e.run(args...)
		if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "Error: ") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	e.ok("alloc", "update", "-status", "failed", "web-1")
	out := e.ok("volume", "deregister", "-force", "vol1")
	contains(t, "force deregister", out, "Attachments that may be left behind (1)", "default/vol1/web-1", "node1", "taken")

	left := e.ok("volume", "leftovers")
	contains(t, "leftovers", left, "default/vol1/web-1", "projects/demo/zones/us-central1-a/disks/vol1")
	var js []*structs.Leftover
	if err := json.Unmarshal([]byte(e.ok("volume", "leftovers", "-json")), &js); err != nil || len(js) != 1 || js[0].AllocID != "web-1" {
		t.Errorf("leftovers -json: %v %+v", err, js)
	}
	contains(t, "clear", e.ok("volume", "leftovers", "-clear", "default/vol1/web-1"), "Cleared 1 leftover(s)")
	contains(t, "leftovers after clear", e.ok("volume", "leftovers"), "No leftovers")
}

func TestStuckVolumeStatus(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	e.ok("alloc", "update", "-status", "complete", "web-1")
	c := &structs.Claim{AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite, State: structs.ClaimNodeDetached,
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem, Attempts: 5,
		LastError: &structs.ClaimError{Kind: structs.ErrorCSI, Step: "controller-unpublish", Code: 14, CodeName: "Unavailable", Message: "connection refused"}}
	if err := e.backend.Checkpoint("default", "vol1", c); err != nil {
		t.Fatal(err)
	}
	if err := e.backend.Stick("default", "vol1", &structs.Stuck{Reason: "claim web-1 past max_attempts (5)", AllocID: "web-1", NodeID: "node1",
		Code: 14, CodeName: "Unavailable", Attempts: 5}); err != nil {
		t.Fatal(err)
	}
	out := e.ok("volume", "status", "vol1")
	contains(t, "stuck status", out, "STUCK", "claim web-1 past max_attempts (5)", "CSI driver (Unavailable)",
		"node-detached", "controller-unpublish: Unavailable: connection refused", "allowed now")
	contains(t, "stuck list", e.ok("volume", "status"), "yes: claim web-1 past max_attempts (5)")

	var v map[string]any
	if err := json.Unmarshal([]byte(e.ok("volume", "status", "-json", "vol1")), &v); err != nil {
		t.Fatal(err)
	}
	if v["stuck"] == nil || v["force_deregister"].(map[string]any)["allowed"] != true {
		t.Errorf("volume status -json: %v", v)
	}
}

// A claim a policy holds shows who holds it, why and until when (`taken 0
// - -` said nothing).
func TestHeldClaimStatus(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	e.ok("alloc", "update", "-status", "complete", "web-1")
	until := time.Date(2026, 12, 1, 18, 30, 0, 0, time.UTC)
	c := &structs.Claim{AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite, State: structs.ClaimTaken,
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
		Hold: &structs.ClaimHold{Module: "grace-policy", ModuleVersion: "1.2.0", Reason: "grace period of 30s", Since: until.Add(-30 * time.Second), Until: until}}
	if err := e.backend.Checkpoint("default", "vol1", c); err != nil {
		t.Fatal(err)
	}
	contains(t, "held status", e.ok("volume", "status", "vol1"), "held by grace-policy@1.2.0: grace period of 30s", fmtTime(until))
}

func TestJSONReads(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	for _, args := range [][]string{
		{"volume", "status", "-json"}, {"volume", "status", "-json", "vol1"},
		{"node", "status", "-json"}, {"node", "status", "-json", "node1"},
		{"plugin", "status", "-json"}, {"plugin", "status", "-json", "gce-pd"},
		{"alloc", "status", "-json"}, {"alloc", "status", "-json", "web-1"},
		{"events", "-json"}, {"volume", "leftovers", "-json"},
	} {
		out := e.ok(args...)
		if !json.Valid([]byte(out)) {
			t.Errorf("%v: not JSON:\n%s", args, out)
		}
	}
}

// TestErrors: every failure is exit 1 with exactly one line on stderr that
// names what is wrong.
// TestNodeFence: fence with a reason, the status an operator reads, claims
// refused, unfence.
func TestNodeFence(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	contains(t, "fence", e.ok("node", "fence", "-reason", "powered off in console", "node1"), `Node "node1" fenced: powered off in console`)
	contains(t, "node status", e.ok("node", "status", "node1"), "fenced, heartbeating", "powered off in console by operator")
	contains(t, "node list", e.ok("node", "status"), "fenced, heartbeating")
	r := e.run("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	if r.code != 1 || !strings.Contains(r.stderr, "fenced") {
		t.Fatalf("claim on a fenced node: exit %d, stderr %q", r.code, r.stderr)
	}
	contains(t, "unfence", e.ok("node", "unfence", "node1"), `Node "node1" unfenced`)
	contains(t, "node status", e.ok("node", "status", "node1"), "Status        = ready", "Fence         = -")
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown hcl field", []string{"volume", "register", "testdata/bad-unknown-field.hcl"},
			[]string{"testdata/bad-unknown-field.hcl:6:", `"size_gb"`}},
		{"unknown json field", []string{"volume", "register", "testdata/bad-unknown-field.json"},
			[]string{"testdata/bad-unknown-field.json:8:", `"colour"`}},
		{"malformed hcl", []string{"volume", "register", "testdata/bad-malformed.hcl"},
			[]string{"testdata/bad-malformed.hcl:3:"}},
		{"missing field", []string{"volume", "register", "testdata/bad-missing-field.hcl"},
			[]string{"testdata/bad-missing-field.hcl:", `"external_id"`}},
		{"bad mode", []string{"volume", "register", "testdata/bad-mode.hcl"},
			[]string{"testdata/bad-mode.hcl:1:", `access_mode: must be one of single-node-reader-only, single-node-writer,`, `got "single-writer"`}},
		{"unknown plugin (server)", []string{"volume", "register", "testdata/bad-unknown-plugin.hcl"},
			[]string{"no-such-plugin"}},
		{"probed field in node file", []string{"node", "register", "testdata/bad-node-block.hcl"},
			[]string{"testdata/bad-node-block.hcl:4:", `"external_node_id"`}},
		{"missing file", []string{"volume", "register", "testdata/nope.hcl"}, []string{"nope.hcl", "no such file"}},
		{"wrong kind of file", []string{"node", "register", "testdata/volume.hcl"}, []string{"testdata/volume.hcl:2:", `"volume"`}},
		{"no args", []string{"volume", "register"}, []string{"not enough arguments", "volume register"}},
		{"extra args", []string{"volume", "status", "a", "b"}, []string{`unexpected argument "b"`}},
		{"bad flag", []string{"volume", "status", "-bogus"}, []string{"flag provided but not defined: -bogus"}},
		{"claim no mode", []string{"volume", "claim", "-alloc", "a", "-node", "n", "vol1"}, []string{`-mode must be one of read, write, got ""`}},
		{"claim bad access mode", []string{"volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "-access-mode", "rw", "vol1"}, []string{`-access-mode must be one of single-node-reader-only, single-node-writer, multi-node-reader-only, multi-node-single-writer, multi-node-multi-writer, got "rw"`}},
		{"claim mismatched attachment", []string{"volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "-attachment-mode", "block-device", "vol1"}, []string{"attachment_mode", "block-device"}},
		{"claim no alloc", []string{"volume", "claim", "-node", "n", "-mode", "read", "vol1"}, []string{"-alloc is required"}},
		{"claim unknown alloc", []string{"volume", "claim", "-alloc", "ghost", "-node", "node1", "-mode", "write", "vol1"}, []string{"ghost"}},
		{"not found", []string{"volume", "status", "nope"}, []string{`volume "default/nope" does not exist`}},
		{"node not found", []string{"node", "status", "nope"}, []string{`node "nope" does not exist`}},
		{"set-status bad", []string{"node", "set-status", "node1", "sleepy"}, []string{`STATUS must be one of ready, down, got "sleepy"`}},
		{"fence without reason", []string{"node", "fence", "node1"}, []string{"-reason is required", "node1"}},
		{"fence unknown node", []string{"node", "fence", "-reason", "off", "ghost"}, []string{`node "ghost" does not exist`}},
		{"unfence unfenced", []string{"node", "unfence", "node1"}, []string{`node "node1" is not fenced`}},
		{"alloc update bad", []string{"alloc", "update", "-status", "done", "web-1"}, []string{`got "done"`}},
		{"alloc update missing", []string{"alloc", "update", "-status", "complete", "ghost"}, []string{`allocation "ghost" does not exist`}},
		{"leftovers both", []string{"volume", "leftovers", "-clear", "x", "-clear-all"}, []string{"cannot be combined"}},
		// An unknown event type matched nothing: "No events", exit 0.
		{"events bad type", []string{"events", "-type", "nope"}, []string{`-type must be one of claim-transition,`, "node-fence", `got "nope"`}},
		// A namespace without a volume was dropped: every namespace's events.
		{"events namespace alone", []string{"events", "-namespace", "prod"}, []string{"-namespace filters only with -volume"}},
		{"unknown subcommand", []string{"volume", "frobnicate"}, []string{`unknown command "volume frobnicate"`}},
		{"bad address", []string{"volume", "status", "-address", "ftp://x"}, []string{"scheme must be http or https"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCLIEnv(t)
			e.setup()
			r := e.run(tt.args...)
			if r.code != 1 {
				t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "Error: ") {
				t.Errorf("stderr is not one error line: %q", r.stderr)
			}
			contains(t, "stderr", r.stderr, tt.want...)
		})
	}
}

func TestUnreachableAgent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	e := newCLIEnv(t)
	r := e.run("volume", "status", "-address", "http://"+addr)
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the volhost agent at http://"+addr) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestAddressFlagWinsOverEnv(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	real := e.addr
	e.addr = "http://127.0.0.1:1" // VOLHOST_ADDR now points nowhere
	out := e.ok("volume", "status", "-address", real)
	contains(t, "volume status", out, "vol1")
}

func TestHelp(t *testing.T) {
	e := newCLIEnv(t)
	for name := range Commands(&Meta{}) {
		if name == "agent" {
			continue // the agent prints its own flags (agent.go)
		}
		args := append(strings.Fields(name), "-help")
		r := e.run(args...)
		if r.code != 0 {
			t.Errorf("%s -help: exit %d", name, r.code)
		}
		if !strings.Contains(r.stdout, "Usage: volhost "+name) {
			t.Errorf("%s -help lacks its usage:\n%s", name, r.stdout)
		}
	}
	r := e.run()
	if r.code != 1 || !strings.Contains(r.stderr, "Available commands are") {
		t.Errorf("no args: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestEventsFollow(t *testing.T) {
	e := newCLIEnv(t)
	e.setup()
	env := func(k string) string {
		if k == "VOLHOST_ADDR" {
			return e.addr
		}
		return e.env[k]
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb testutil.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"events", "-follow"}, env, &out, &errb) }()

	deadline, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	waitFor(t, deadline, "the header", func() (string, bool) { return "", strings.Contains(out.String(), "Index\tTime") })
	// A claim records a claim-transition event, which the follower prints.
	e.ok("volume", "claim", "-alloc", "web-1", "-node", "node1", "-mode", "write", "vol1")
	waitFor(t, deadline, "the claim's event", func() (string, bool) {
		return "", strings.Contains(out.String(), "claim-transition\tdefault/vol1\tweb-1")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("follow ended with exit %d: %s", code, errb.String())
	}
}
