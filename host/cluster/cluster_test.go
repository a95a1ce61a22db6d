package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func logger(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// startNoBarrier runs a cluster and waits for the step-up on LeaderCh.
func startNoBarrier(t *testing.T, cfg Config) (*Cluster, *state.Store) {
	t.Helper()
	cfg.Logger = logger(t)
	s := state.NewStore()
	c, err := New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	select {
	case v := <-c.LeaderCh():
		if !v {
			t.Fatal("first leadership notification is a step-down")
		}
	case <-testCtx(t).Done():
		t.Fatal("never became leader")
	}
	return c, s
}

// start runs a cluster and waits until it leads with its log applied.
func start(t *testing.T, cfg Config) (*Cluster, *state.Store) {
	t.Helper()
	cfg.Logger = logger(t)
	s := state.NewStore()
	c, err := New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	ctx := testCtx(t)
	if err := c.WaitForLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	return c, s
}

type baseData struct {
	Plugins []*structs.Plugin `json:"plugins"`
	Nodes   []*structs.Node   `json:"nodes"`
	Allocs  []*structs.Alloc  `json:"allocs"`
	Volumes []*structs.Volume `json:"volumes"`
}

// readBase reads testdata/base.json: the plugins, nodes, volumes and
// claims the cluster tests and FuzzFSMApply start from.
func readBase(t testing.TB) baseData {
	t.Helper()
	raw, err := os.ReadFile("testdata/base.json")
	if err != nil {
		t.Fatal(err)
	}
	var b baseData
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// loadBase applies testdata/base.json through the cluster.
func loadBase(t testing.TB, c *Cluster) {
	t.Helper()
	b := readBase(t)
	for _, p := range b.Plugins {
		mustApply(t, c, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: p})
	}
	for _, n := range b.Nodes {
		mustApply(t, c, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: n})
	}
	mustApply(t, c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: b.Allocs})
	mustApply(t, c, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: b.Volumes})
}

func mustApply(t testing.TB, c *Cluster, typ structs.MessageType, req any) (uint64, any) {
	t.Helper()
	idx, resp, err := c.Apply(testCtx(t), typ, req)
	if err != nil {
		t.Fatalf("apply %d: %v", typ, err)
	}
	return idx, resp
}

func digest(t testing.TB, s *state.Store) string {
	t.Helper()
	d, err := s.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func claimReq(vol, alloc, node string) *structs.VolumeClaimRequest {
	return &structs.VolumeClaimRequest{Namespace: "default", VolumeID: vol,
		Claim: &structs.Claim{AllocID: alloc, NodeID: node, Mode: structs.ClaimWrite, ExternalNodeID: "ext-" + node,
			PublishContext: map[string]string{"device": "/dev/xvdf"}}}
}

func TestDevApplyAndRead(t *testing.T) {
	c, s := start(t, Config{Dev: true})
	if !c.IsLeader() {
		t.Fatal("not leader")
	}
	if addr, id := c.Leader(); addr == "" || id != DefaultNodeID {
		t.Fatalf("leader %q %q", addr, id)
	}
	loadBase(t, c)
	idx, _ := mustApply(t, c, structs.VolumeClaimType, claimReq("vol-sw", "a1", "n1"))
	snap := s.Snapshot()
	v, err := snap.VolumeByID(nil, "default", "vol-sw")
	if err != nil {
		t.Fatal(err)
	}
	cl := v.Claims["a1"]
	if cl == nil || cl.State != structs.ClaimTaken || cl.CreateIndex != idx || v.ModifyIndex != idx || cl.PublishContext["device"] != "/dev/xvdf" {
		t.Fatalf("claim %+v at volume index %d, want index %d", cl, v.ModifyIndex, idx)
	}
	if got, _ := snap.Index(state.TableVolumes); got != idx {
		t.Fatalf("volumes index %d, want %d", got, idx)
	}
	// The FSM stamps the claim with the time carried in the entry.
	if cl.CreateTime.IsZero() {
		t.Fatal("claim create time not set")
	}
	select {
	case v := <-c.LeaderCh():
		if !v {
			t.Fatal("leader channel says not leader")
		}
	default:
		t.Fatal("no step-up notification kept on LeaderCh")
	}
}

// A refused request returns the store's typed error and commits nothing:
// the raft log does not grow and the state digest does not change.
func TestApplyRefusedCommitsNothing(t *testing.T) {
	c, s := start(t, Config{Dev: true})
	loadBase(t, c)
	mustApply(t, c, structs.VolumeClaimType, claimReq("vol-sw", "a1", "n1"))
	tests := []struct {
		name string
		typ  structs.MessageType
		req  any
		is   error
	}{
		{"second writer", structs.VolumeClaimType, claimReq("vol-sw", "a5", "n1"), structs.ErrConflict},
		{"deregister in use", structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-sw"}, structs.ErrConflict},
		{"unknown plugin", structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{Namespace: "default", ID: "x",
			ExternalID: "e", PluginID: "zfs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}}}, structs.ErrNotFound},
		{"bad mode", structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-mw",
			Claim: &structs.Claim{AllocID: "a2", NodeID: "n2", Mode: "exclusive"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, last := digest(t, s), c.LastIndex()
			_, _, err := c.Apply(testCtx(t), tc.typ, tc.req)
			var ve *structs.ValidationError
			switch {
			case err == nil:
				t.Fatal("request accepted")
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Fatalf("got %v, want %v", err, tc.is)
			case tc.is == nil && !errors.As(err, &ve):
				t.Fatalf("got %v, want a *structs.ValidationError", err)
			}
			if c.LastIndex() != last {
				t.Fatalf("log grew from %d to %d", last, c.LastIndex())
			}
			if digest(t, s) != before {
				t.Fatal("state changed")
			}
		})
	}
}

// A request that passed validation but races another write is refused by
// the FSM at apply time; the typed error comes back, the state is intact.
func TestApplyTimeRefusalIsReturned(t *testing.T) {
	c, s := start(t, Config{Dev: true})
	loadBase(t, c)
	before := digest(t, s)
	// Bypass the leader-side check to simulate the race.
	data, err := encodeCommand(structs.VolumeDeregisterType, time.Now(), &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	f := c.raft.Apply(data, time.Minute)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	res := f.Response().(fsmResult)
	if !errors.Is(res.err, structs.ErrNotFound) {
		t.Fatalf("FSM response %v, want not found", res.err)
	}
	if digest(t, s) != before {
		t.Fatal("state changed")
	}
}

func TestForceDeregisterThroughRaft(t *testing.T) {
	c, _ := start(t, Config{Dev: true})
	loadBase(t, c)
	mustApply(t, c, structs.VolumeClaimType, claimReq("vol-sw", "a1", "n1"))
	mustApply(t, c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete}}})
	_, resp := mustApply(t, c, structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-sw", Force: true})
	ls, ok := resp.([]*structs.Leftover)
	if !ok || len(ls) != 1 || ls[0].NodeID != "n1" || ls[0].ExternalNodeID != "ext-n1" || ls[0].State != structs.ClaimTaken {
		t.Fatalf("leftovers %#v", resp)
	}
}

func TestNotLeaderFailsFast(t *testing.T) {
	// A data dir that was never bootstrapped has no cluster to lead.
	s := state.NewStore()
	c, err := New(Config{DataDir: t.TempDir(), Logger: logger(t)}, s)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	if _, _, err := c.Apply(testCtx(t), structs.EventAppendType, &structs.EventAppendRequest{}); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("got %v, want ErrNoLeader", err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Apply(testCtx(t), structs.EventAppendType, &structs.EventAppendRequest{}); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("after shutdown: got %v, want ErrNoLeader", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{{}, {Dev: true, DataDir: "x"}} {
		if _, err := New(cfg, state.NewStore()); err == nil {
			t.Fatalf("config %+v accepted", cfg)
		}
	}
	if _, err := New(Config{Dev: true}, nil); err == nil {
		t.Fatal("nil store accepted")
	}
}

// With a data dir, a restart rebuilds the same state from the log, and from
// a snapshot plus the log after it: nothing is lost.
func TestDataDirRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Bootstrap: true, NodeID: "server-1", SnapshotThreshold: 1 << 20}

	c, s := start(t, cfg)
	loadBase(t, c)
	for i := 0; i < 20; i++ {
		mustApply(t, c, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Message: fmt.Sprint(i)}}})
	}
	mustApply(t, c, structs.VolumeClaimType, claimReq("vol-sw", "a1", "n1"))
	want, wantIdx := digest(t, s), s.LatestIndex()
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}

	// Restart 1: log replay only. The step-up notification comes after the
	// replay, so leader-only work started on it sees the whole state.
	c, s = startNoBarrier(t, cfg)
	if got := digest(t, s); got != want || s.LatestIndex() != wantIdx {
		t.Fatalf("after restart: digest equal=%v, index %d want %d", got == want, s.LatestIndex(), wantIdx)
	}
	// Forced snapshot, then more writes on top of it.
	if err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete}}})
	cl := s.Snapshot()
	v, _ := cl.VolumeByID(nil, "default", "vol-sw")
	claim := v.Claims["a1"].Copy()
	claim.State = structs.ClaimNodeDetached
	mustApply(t, c, structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: claim})
	want, wantIdx = digest(t, s), s.LatestIndex()
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*", "state.bin"))
	if len(snaps) == 0 {
		t.Fatal("no snapshot on disk")
	}

	// Restart 2: snapshot restore plus the log after it.
	_, s = start(t, cfg)
	if got := digest(t, s); got != want || s.LatestIndex() != wantIdx {
		t.Fatalf("after snapshot restart: digest equal=%v, index %d want %d", got == want, s.LatestIndex(), wantIdx)
	}
	v, _ = s.Snapshot().VolumeByID(nil, "default", "vol-sw")
	if v.Claims["a1"].State != structs.ClaimNodeDetached {
		t.Fatalf("claim state %s after restart", v.Claims["a1"].State)
	}
}

// Every message type's request survives the log encoding field for field,
// time.Time included: the requests are filled by reflection, so a field
// added to host/structs later is covered too.
func TestCodecRoundTripsEveryField(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 30, 45, 123456789, time.UTC)
	for typ := structs.MessageType(1); typ <= structs.VolumeClaimRemoveType; typ++ {
		req, err := newRequest(typ)
		if err != nil {
			t.Fatalf("type %d: %v", typ, err)
		}
		testutil.Fill(reflect.ValueOf(req).Elem(), now)
		data, err := encodeCommand(typ, now, req)
		if err != nil {
			t.Fatal(err)
		}
		gotType, gotTime, got, err := decodeCommand(data)
		if err != nil {
			t.Fatal(err)
		}
		if gotType != typ || !gotTime.Equal(now) || !reflect.DeepEqual(got, req) {
			t.Fatalf("type %d: round trip changed the request\n got %#v\nwant %#v", typ, got, req)
		}
	}
	if _, _, _, err := decodeCommand([]byte{200, '{', '}'}); err == nil {
		t.Fatal("unknown type decoded")
	}
	if _, _, _, err := decodeCommand([]byte{byte(structs.ClaimGCType), '{'}); err == nil {
		t.Fatal("truncated entry decoded")
	}
}

// The watcher's writer goes through the log and keeps the store's typed
// errors; a live allocation refuses the escape hatch.
func TestClaimWriter(t *testing.T) {
	c, s := start(t, Config{Dev: true})
	loadBase(t, c)
	mustApply(t, c, structs.VolumeClaimType, claimReq("vol-sw", "a1", "n1"))
	w := c.ClaimWriter()
	ctx := testCtx(t)
	ref := &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-sw", Reason: "escape-hatch"}
	if _, err := w.ForceDeregister(ctx, ref); !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("force with live alloc: %v", err)
	}
	idx, err := w.MarkStuck(ctx, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-sw", Stuck: &structs.Stuck{Reason: "r"}})
	if err != nil || idx == 0 {
		t.Fatalf("mark stuck: %d %v", idx, err)
	}
	gcIdx, err := w.GCClaims(ctx, &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: "vol-sw"}}})
	if err != nil || gcIdx <= idx {
		t.Fatalf("gc: %d %v", gcIdx, err)
	}
	mustApply(t, c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocFailed}}})
	v, _ := s.Snapshot().VolumeByID(nil, "default", "vol-sw")
	cl := v.Claims["a1"].Copy()
	cl.State = structs.ClaimNodeDetached
	// Leader work without a term is refused before the log (the FSM
	// would take term 0 as unfenced), and changes nothing.
	if _, err := w.CheckpointClaim(ctx, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: cl}); !errors.Is(err, structs.ErrNoLeader) || !strings.Contains(err.Error(), "without a leadership term") {
		t.Fatalf("checkpoint without a term: %v, want refused", err)
	}
	if _, err := w.FenceNode(ctx, &structs.NodeFenceRequest{NodeID: "n1", Fence: &structs.NodeFence{Reason: "off", Source: "module:m@1"}}); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("module fence without a term: %v, want refused", err)
	}
	if v, _ := s.Snapshot().VolumeByID(nil, "default", "vol-sw"); v.Claims["a1"].State != structs.ClaimTaken {
		t.Fatalf("a refused checkpoint moved the claim to %s", v.Claims["a1"].State)
	}
	if _, err := w.CheckpointClaim(ctx, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: cl, Term: c.ReadyTerm()}); err != nil {
		t.Fatal(err)
	}
	ls, err := w.ForceDeregister(ctx, ref)
	if err != nil || len(ls) != 1 || ls[0].State != structs.ClaimNodeDetached || ls[0].Reason != "escape-hatch" {
		t.Fatalf("leftovers %+v, %v", ls, err)
	}
	evs, _ := s.Snapshot().Events(nil, 0)
	if e := evs[len(evs)-1]; e.Type != structs.EventAutoForce {
		t.Fatalf("last event %+v", e)
	}
}
