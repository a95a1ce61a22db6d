package client

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/nodeconn"
	"github.com/volhost/volhost/internal/testutil"
)

const keyA = "default/vol1/alloc1/7/node-unpublish"

// pathA is the path of keyA's step in the journal's own tests.
const pathA = "/root/csi/p/per-alloc/alloc1/default/vol1"

// pathOf gives each key of the journal's own tests a path of its own.
func pathOf(key string) string {
	if key == keyA {
		return pathA
	}
	return pathA + "-" + key
}

func TestJournal(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		// run drives a journal opened on root, then reopens it (an agent
		// restart) and checks what the new one says.
		run func(t *testing.T, j *journal, clk *clockwork.FakeClock) (check func(t *testing.T, j *journal))
	}{
		{name: "a success survives a restart and answers the retry", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			mustBegin(t, j, keyA, nil)
			if err := j.finish(keyA, nodeconn.MethodUnpublish, true); err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T, j *journal) { mustBegin(t, j, keyA, &journalEntry{State: entryDone}) }
		}},
		{name: "started with no answer is called again", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			mustBegin(t, j, keyA, nil) // the agent dies during the driver call
			return func(t *testing.T, j *journal) { mustBegin(t, j, keyA, &journalEntry{State: entryStarted}) }
		}},
		{name: "a driver error is not kept", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			mustBegin(t, j, keyA, nil)
			if err := j.finish(keyA, nodeconn.MethodUnpublish, false); err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T, j *journal) { mustBegin(t, j, keyA, nil) }
		}},
		{name: "an acknowledged step is forgotten", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			mustBegin(t, j, keyA, nil)
			_ = j.finish(keyA, nodeconn.MethodUnpublish, true)
			if err := j.ack(keyA); err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T, j *journal) { mustBegin(t, j, keyA, nil) }
		}},
		{name: "another method under the same key is not its answer", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			mustBegin(t, j, keyA, nil)
			_ = j.finish(keyA, nodeconn.MethodUnpublish, true)
			return func(t *testing.T, j *journal) {
				if prev, err := j.begin(keyA, nodeconn.MethodUnstage, pathA); err != nil || prev != nil {
					t.Fatalf("begin = %+v, %v; want no entry", prev, err)
				}
			}
		}},
		{name: "entries expire after the TTL", run: func(t *testing.T, j *journal, clk *clockwork.FakeClock) func(*testing.T, *journal) {
			mustBegin(t, j, keyA, nil)
			_ = j.finish(keyA, nodeconn.MethodUnpublish, true)
			clk.Advance(journalTTL)
			return func(t *testing.T, j *journal) {
				if n := j.len(); n != 0 {
					t.Fatalf("entries after the TTL = %d, want 0", n)
				}
				mustBegin(t, j, keyA, nil)
			}
		}},
		{name: "a step on the same path drops the answer", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			mustBegin(t, j, keyA, nil)
			_ = j.finish(keyA, nodeconn.MethodUnpublish, true)
			mustBegin(t, j, "b", nil) // another path: keyA's answer stays
			_ = j.finish("b", nodeconn.MethodUnpublish, true)
			mustBegin(t, j, keyA, &journalEntry{State: entryDone})
			if err := j.supersede(pathA); err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T, j *journal) {
				mustBegin(t, j, keyA, nil)
				mustBegin(t, j, "b", &journalEntry{State: entryDone})
			}
		}},
		{name: "an answer a step on its path made stale while it ran is not kept", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			mustBegin(t, j, keyA, nil)
			if err := j.supersede(pathA); err != nil {
				t.Fatal(err)
			}
			_ = j.finish(keyA, nodeconn.MethodUnpublish, true)
			return func(t *testing.T, j *journal) { mustBegin(t, j, keyA, nil) }
		}},
		{name: "an entry without its path is dropped", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			b, _ := json.Marshal(journalEntry{Key: keyA, Method: nodeconn.MethodUnpublish, State: entryDone, Started: t0, Done: t0})
			if err := os.WriteFile(filepath.Join(j.dir, fileName(keyA)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T, j *journal) { mustBegin(t, j, keyA, nil) }
		}},
		{name: "a torn entry is dropped", run: func(t *testing.T, j *journal, _ *clockwork.FakeClock) func(*testing.T, *journal) {
			if err := os.WriteFile(filepath.Join(j.dir, fileName(keyA)), []byte(`{"key":"default/vo`), 0o600); err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T, j *journal) { mustBegin(t, j, keyA, nil) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, clk := t.TempDir(), clockwork.NewFakeClockAt(t0)
			j, err := openJournal(root, clk)
			if err != nil {
				t.Fatal(err)
			}
			check := tc.run(t, j, clk)
			j2, err := openJournal(root, clk)
			if err != nil {
				t.Fatal(err)
			}
			check(t, j2)
		})
	}
}

func mustBegin(t *testing.T, j *journal, key string, want *journalEntry) {
	t.Helper()
	prev, err := j.begin(key, nodeconn.MethodUnpublish, pathOf(key))
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	switch {
	case want == nil && prev != nil:
		t.Fatalf("begin found %+v, want no entry", prev)
	case want != nil && (prev == nil || prev.State != want.State || prev.Key != key):
		t.Fatalf("begin found %+v, want a %s entry", prev, want.State)
	}
}

func TestJournalInFlightAndBound(t *testing.T) {
	clk := clockwork.NewFakeClock()
	j, err := openJournal(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	mustBegin(t, j, keyA, nil)
	if _, err := j.begin(keyA, nodeconn.MethodUnpublish, pathA); !errors.Is(err, errStepInFlight) {
		t.Fatalf("second begin = %v, want errStepInFlight", err)
	}
	j.max = 3
	for i := range 5 {
		clk.Advance(time.Second)
		k := keyA + string(rune('a'+i))
		mustBegin(t, j, k, nil)
		_ = j.finish(k, nodeconn.MethodUnpublish, true)
	}
	if n := j.len(); n != 3 {
		t.Fatalf("entries = %d, want the bound 3", n)
	}
	files, _ := filepath.Glob(filepath.Join(j.dir, "*.json"))
	if len(files) != 3 {
		t.Fatalf("files = %d, want 3", len(files))
	}
	// The in-flight key survives the bound; the oldest finished ones went.
	if _, err := j.begin(keyA, nodeconn.MethodUnpublish, pathA); !errors.Is(err, errStepInFlight) {
		t.Fatalf("in-flight entry dropped by the bound: %v", err)
	}
	if prev, _ := j.begin(keyA+"a", nodeconn.MethodUnpublish, pathOf(keyA+"a")); prev != nil {
		t.Fatalf("the oldest entry survived the bound: %+v", prev)
	}
}

// An agent restarted over a journal runs each keyed step against the
// driver once: a success is answered from the journal, a step started by
// the previous run with no answer is called again and logged as such.
func TestAgentAnswersKeyedRetryFromJournal(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1", StageUnstage: true})
	_, target := csi.Paths(root, "p", "default", "vol1", "alloc1")
	body, err := proto.Marshal(&csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target})
	if err != nil {
		t.Fatal(err)
	}
	step := &nodeconn.StepRequest{ID: 1, Method: nodeconn.MethodUnpublish, Endpoint: plugin.Endpoint(), Request: body, Key: keyA}
	var logs testutil.SyncBuffer
	newAgent := func() *Agent {
		a, err := New(Config{Servers: []string{"127.0.0.1:1"}, NodeID: "n1", RootDir: root,
			Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clockwork.NewFakeClock(),
			Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.csi.Close() })
		return a
	}

	// Run 1: the driver answers, the answer is journaled; its reply is
	// then lost with the agent.
	if err := newAgent().executeKeyed(ctx, step); err != nil {
		t.Fatal(err)
	}
	// Run 2: the leader's retry is answered from the journal.
	a2 := newAgent()
	if err := a2.executeKeyed(ctx, step); err != nil {
		t.Fatal(err)
	}
	if n := len(plugin.Calls(csitest.NodeUnpublish)); n != 1 {
		t.Fatalf("NodeUnpublish reached the driver %d times, want 1", n)
	}
	if !strings.Contains(logs.String(), "answered from the step journal") {
		t.Fatalf("log does not say the retry was answered from the journal:\n%s", logs.String())
	}
	// A step without a key is never answered from the journal.
	unkeyed := *step
	unkeyed.Key = ""
	if err := a2.executeKeyed(ctx, &unkeyed); err != nil {
		t.Fatal(err)
	}
	if n := len(plugin.Calls(csitest.NodeUnpublish)); n != 2 {
		t.Fatalf("an unkeyed step reached the driver %d times in all, want 2", n)
	}

	// A step the previous run started and never finished (it was killed
	// during the driver call) is called again, and the log says why.
	unstage := &nodeconn.StepRequest{ID: 2, Method: nodeconn.MethodUnstage, Endpoint: plugin.Endpoint(), Key: keyA + "-unstage"}
	staging, _ := csi.Paths(root, "p", "default", "vol1", "alloc1")
	if unstage.Request, err = proto.Marshal(&csipb.NodeUnstageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if _, err := a2.journal.begin(unstage.Key, unstage.Method, staging); err != nil {
		t.Fatal(err)
	}
	a3 := newAgent()
	if err := a3.executeKeyed(ctx, unstage); err != nil {
		t.Fatal(err)
	}
	if n := len(plugin.Calls(csitest.NodeUnstage)); n != 1 {
		t.Fatalf("NodeUnstage reached the driver %d times, want 1 (called again)", n)
	}
	if !strings.Contains(logs.String(), "may or may not have run") {
		t.Fatalf("log does not say the started step was called again:\n%s", logs.String())
	}
	// A driver error is answered as the driver gave it and not journaled.
	plugin.Script(csitest.NodeUnstage, csitest.Result{Code: codes.Internal, Message: "busy"})
	step3 := *unstage
	step3.Key = keyA + "-other"
	if err := a3.executeKeyed(ctx, &step3); status.Code(err) != codes.Internal {
		t.Fatalf("err = %v, want the driver's Internal", err)
	}
	if err := a3.executeKeyed(ctx, &step3); err != nil {
		t.Fatalf("retry after a driver error: %v", err)
	}
	if n := len(plugin.Calls(csitest.NodeUnstage)); n != 3 {
		t.Fatalf("NodeUnstage calls = %d, want 3 (the failed one retried for real)", n)
	}
}

// A root_dir where the journal cannot be created is one clear error at
// start, not a silently unjournaled agent.
func TestJournalUnwritableRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(root, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{Servers: []string{"127.0.0.1:1"}, NodeID: "n1", RootDir: root, Plugins: map[string]string{"p": "unix:///x"}})
	if err == nil || !strings.Contains(err.Error(), "client.root_dir") || !strings.Contains(err.Error(), "journal") {
		t.Fatalf("err = %v, want one naming client.root_dir and the journal", err)
	}
}

// A keyed step's recorded answer is never replayed once a later step on
// the same path has undone its effect: an unstage answered from the
// journal after the path was staged again would leave the mount behind,
// and the leader, told the path is unstaged, would detach the disk under
// it (ControllerUnpublish). The journal answered that unstage "done" from
// its record before a step on a path made the path's earlier answers
// stale. The same holds across an agent restart, and for unpublish and
// publish of a target path.
func TestJournalForgetsAnswersALaterStepUndid(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	plugin := csitest.NewServer(t, csitest.Options{NodeID: "ext-n1", StageUnstage: true})
	staging, target := csi.Paths(root, "p", "default", "vol1", "alloc1")
	newAgent := func() *Agent {
		a, err := New(Config{Servers: []string{"127.0.0.1:1"}, NodeID: "n1", RootDir: root,
			Plugins: map[string]string{"p": plugin.Endpoint()}, Clock: clockwork.NewFakeClock(), Logger: hclog.NewNullLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.csi.Close() })
		return a
	}
	step := func(id uint64, method, key string, m proto.Message) *nodeconn.StepRequest {
		body, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return &nodeconn.StepRequest{ID: id, Method: method, Endpoint: plugin.Endpoint(), Request: body, Key: key}
	}
	cap := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	unstage := step(1, nodeconn.MethodUnstage, keyA+"-unstage", &csipb.NodeUnstageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging})
	stage := step(2, nodeconn.MethodStage, "", &csipb.NodeStageVolumeRequest{VolumeId: "d1", StagingTargetPath: staging, VolumeCapability: cap})
	unpublish := step(3, nodeconn.MethodUnpublish, keyA, &csipb.NodeUnpublishVolumeRequest{VolumeId: "d1", TargetPath: target})
	publish := step(4, nodeconn.MethodPublish, "", &csipb.NodePublishVolumeRequest{VolumeId: "d1", StagingTargetPath: staging, TargetPath: target, VolumeCapability: cap})
	other := step(5, nodeconn.MethodUnstage, keyA+"-elsewhere", &csipb.NodeUnstageVolumeRequest{VolumeId: "d2",
		StagingTargetPath: filepath.Join(filepath.Dir(staging), "vol2")})

	a := newAgent()
	for _, s := range []*nodeconn.StepRequest{unstage, unpublish, other} {
		if err := a.executeKeyed(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// The claim path stages and publishes the same paths again (no key:
	// a claim's steps are not journaled).
	for _, s := range []*nodeconn.StepRequest{stage, publish} {
		if err := a.executeKeyed(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// The release's retries of the first answers reach the driver, after
	// an agent restart too; an answer on another path is still replayed.
	a = newAgent()
	for _, s := range []*nodeconn.StepRequest{unstage, unpublish, other} {
		if err := a.executeKeyed(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(plugin.Calls(csitest.NodeUnstage)); n != 3 {
		t.Fatalf("NodeUnstage reached the driver %d times, want 3: the retry after the re-stage was answered from the journal", n)
	}
	if n := len(plugin.Calls(csitest.NodeUnpublish)); n != 2 {
		t.Fatalf("NodeUnpublish reached the driver %d times, want 2: the retry after the re-publish was answered from the journal", n)
	}
}
