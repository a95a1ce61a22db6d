package metrics_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/cluster"
	"github.com/volhost/volhost/host/metrics"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
)

// The watcher and the checkpoints' group commit report straight into
// Metrics.
var (
	_ watcher.Metrics        = (*metrics.Metrics)(nil)
	_ cluster.CommitObserver = (*metrics.Metrics)(nil)
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/metrics", nil))
	b, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func apply(t *testing.T, st *state.Store, index uint64, mt structs.MessageType, req any) {
	t.Helper()
	if _, err := st.Apply(index, mt, req); err != nil {
		t.Fatalf("apply type %d: %v", mt, err)
	}
}

func volume(id string) *structs.Volume {
	return &structs.Volume{Namespace: "default", ID: id, ExternalID: "disk-" + id, PluginID: "p",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}
}

func TestStateGauges(t *testing.T) {
	st := state.NewStore()
	m := metrics.New(st)

	empty := scrape(t, m)
	for _, want := range []string{"volhost_volumes 0", `volhost_claims{state="taken"} 0`, "volhost_volumes_stuck 0", "volhost_leftovers 0"} {
		if !strings.Contains(empty, want+"\n") {
			t.Errorf("empty store: scrape lacks %q", want)
		}
	}

	apply(t, st, 1, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p"}})
	apply(t, st, 2, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady}})
	apply(t, st, 3, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning},
		{ID: "a2", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning},
	}})
	apply(t, st, 4, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{volume("v1"), volume("v2"), volume("v3")}})
	for i, c := range []struct{ vol, alloc string }{{"v1", "a1"}, {"v2", "a2"}} {
		apply(t, st, uint64(5+i), structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: c.vol, Claim: &structs.Claim{
			AllocID: c.alloc, NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimTaken,
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
		}})
	}
	// a1 ends; its claim fails at the controller step and the volume is stuck.
	apply(t, st, 7, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete},
	}})
	apply(t, st, 8, structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "v1", Claim: &structs.Claim{
		AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimNodeDetached, Attempts: 3,
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
		LastError: &structs.ClaimError{Kind: structs.ErrorCSI, Step: "controller-unpublish", Code: uint32(codes.Unavailable), Message: "down"},
	}})
	apply(t, st, 9, structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "v1",
		Stuck: &structs.Stuck{Reason: "max attempts", Attempts: 3}})

	got := scrape(t, m)
	tests := []string{
		"volhost_volumes 3",
		`volhost_claims{state="taken"} 1`,
		`volhost_claims{state="node-detached"} 1`,
		`volhost_claims{state="controller-detached"} 0`,
		`volhost_claims{state="ready-to-free"} 0`,
		"volhost_claims_failing 1",
		"volhost_volumes_stuck 1",
		"volhost_leftovers 0",
	}
	for _, want := range tests {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("scrape lacks %q", want)
		}
	}

	// Force-deregistering the stuck volume leaves its attachment behind.
	apply(t, st, 10, structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "v1", Force: true})
	got = scrape(t, m)
	for _, want := range []string{"volhost_volumes 2", "volhost_volumes_stuck 0", "volhost_leftovers 1", `volhost_claims{state="node-detached"} 0`} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("after force deregister: scrape lacks %q", want)
		}
	}
}

func TestCounters(t *testing.T) {
	m := metrics.New(state.NewStore())
	m.ObserveCall("ControllerUnpublishVolume", codes.OK, 20*time.Millisecond)
	m.ObserveCall("ControllerUnpublishVolume", codes.Unavailable, 2*time.Second)
	m.ObserveCall("ControllerUnpublishVolume", codes.Unavailable, time.Second)
	m.ObserveCall("NodeUnpublishVolume", codes.DeadlineExceeded, 2*time.Minute)
	ref := structs.VolumeRef{Namespace: "default", ID: "v1"}
	m.ClaimReleased(ref, "a1")
	m.ClaimReleased(ref, "a2")
	m.AttemptFailed(ref, "a3", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "controller-unpublish", Code: uint32(codes.Unavailable)})
	m.AttemptFailed(ref, "a3", &structs.ClaimError{Kind: structs.ErrorCSI, Step: "controller-unpublish", Code: uint32(codes.Unavailable), CodeName: "Unavailable"})
	m.AttemptFailed(ref, "a4", &structs.ClaimError{Kind: structs.ErrorModule, Step: "policy", Fault: "timeout", Module: "bad-policy"})
	m.AttemptFailed(ref, "a5", &structs.ClaimError{Kind: structs.ErrorPrecondition, Step: "node-unpublish"})
	m.VolumeStuck(ref, &structs.Stuck{Reason: "max attempts"})
	m.VolumeStuck(ref, nil) // cleared: not counted
	m.VolumeAssessed(ref)
	m.AutoForceDeregistered()
	m.ForcedDetach("operator")
	m.ForcedDetach("operator")
	m.ModuleCall("default-policy", "release-policy", 50*time.Microsecond, "")
	m.ModuleCall("bad-policy", "release-policy", time.Second, "timeout")
	m.CheckpointsCommitted(3, 20*time.Millisecond)
	m.CheckpointsCommitted(1, 4*time.Millisecond)

	got := scrape(t, m)
	for _, want := range []string{
		`volhost_csi_calls_total{code="OK",method="ControllerUnpublishVolume"} 1`,
		`volhost_csi_calls_total{code="Unavailable",method="ControllerUnpublishVolume"} 2`,
		`volhost_csi_calls_total{code="DeadlineExceeded",method="NodeUnpublishVolume"} 1`,
		`volhost_csi_call_duration_seconds_count{method="ControllerUnpublishVolume"} 3`,
		`volhost_csi_call_duration_seconds_sum{method="ControllerUnpublishVolume"} 3.02`,
		`volhost_csi_call_duration_seconds_bucket{method="NodeUnpublishVolume",le="60"} 0`,
		`volhost_csi_call_duration_seconds_bucket{method="NodeUnpublishVolume",le="120"} 1`,
		"volhost_claims_released_total 2",
		`volhost_claim_release_failures_total{code="Unavailable",step="controller-unpublish"} 2`,
		`volhost_claim_release_failures_total{code="precondition",step="node-unpublish"} 1`,
		"volhost_volume_assessments_total 1",
		`volhost_claim_release_failures_total{code="timeout",step="policy"} 1`,
		"volhost_volumes_marked_stuck_total 1",
		"volhost_auto_force_deregisters_total 1",
		`volhost_forced_detaches_total{reason="operator-fence"} 2`,
		`volhost_forced_detaches_total{reason="module-fence"} 0`,
		`volhost_module_calls_total{kind="release-policy",module="default-policy"} 1`,
		`volhost_module_faults_total{fault="timeout",module="bad-policy"} 1`,
		`volhost_module_decision_duration_seconds_count{kind="release-policy",module="bad-policy"} 1`,
		"volhost_checkpoint_commit_duration_seconds_count 2",
		"volhost_checkpoint_commit_duration_seconds_sum 0.024",
		`volhost_checkpoint_commit_duration_seconds_bucket{le="0.004"} 1`,
		"volhost_checkpoint_commit_checkpoints_sum 4",
		`volhost_checkpoint_commit_checkpoints_bucket{le="2"} 1`,
		`volhost_checkpoint_commit_checkpoints_bucket{le="4"} 2`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(got, `volhost_module_faults_total{fault="",`) {
		t.Error("a successful module call counted as a fault")
	}
}

func TestNilMetricsIsNoop(t *testing.T) {
	var m *metrics.Metrics
	m.ObserveCall("x", codes.OK, time.Second)
	m.ClaimReleased(structs.VolumeRef{}, "a")
	m.AttemptFailed(structs.VolumeRef{}, "a", nil)
	m.VolumeStuck(structs.VolumeRef{}, &structs.Stuck{})
	m.VolumeAssessed(structs.VolumeRef{})
	m.AutoForceDeregistered()
	m.ForcedDetach("operator")
	m.ModuleCall("m", "k", time.Second, "trap")
	m.CheckpointsCommitted(1, time.Second)
}

type failingSource struct{}

func (failingSource) VolumeStats() (state.VolumeStats, error) {
	return state.VolumeStats{}, errors.New("snapshot broke")
}
func (failingSource) Leftovers() ([]*structs.Leftover, error) { return nil, nil }

func TestSourceErrorKeepsOtherSeries(t *testing.T) {
	m := metrics.NewWithSource(func() metrics.Source { return failingSource{} })
	m.ClaimReleased(structs.VolumeRef{}, "a")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/metrics", nil))
	got := rec.Body.String()
	if !strings.Contains(got, "volhost_claims_released_total 1\n") || !strings.Contains(got, "volhost_leftovers 0\n") {
		t.Errorf("a failing snapshot hid other series:\n%s", got)
	}
	if strings.Contains(got, "volhost_volumes ") {
		t.Errorf("volumes gauge reported despite the error")
	}
}
