package api

import (
	"testing"
	"time"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// TestStuckSampler: a sample counts the stuck volumes of the store, and
// the series keeps only the last stuckSamples samples.
func TestStuckSampler(t *testing.T) {
	st := state.NewStore()
	vols := []*structs.Volume{
		{Namespace: "default", ID: "a", PluginID: "p", ExternalID: "d-a", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem},
		{Namespace: "default", ID: "b", PluginID: "p", ExternalID: "d-b", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem},
	}
	if _, err := st.Apply(1, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(2, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols}); err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{}, st, nil, nil)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.sampleStuck(t0)
	if _, err := st.Apply(3, structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "b", Stuck: &structs.Stuck{Reason: "r"}}); err != nil {
		t.Fatal(err)
	}
	s.sampleStuck(t0.Add(StuckSampleEvery))
	got := s.stuckSamples.list()
	if len(got) != 2 || got[0].Count != 0 || got[1].Count != 1 || !got[1].Time.Equal(t0.Add(StuckSampleEvery)) {
		t.Fatalf("samples %+v, want 0 then 1", got)
	}
	for i := range stuckSamples + 5 {
		s.sampleStuck(t0.Add(time.Duration(i+2) * StuckSampleEvery))
	}
	got = s.stuckSamples.list()
	if len(got) != stuckSamples || !got[len(got)-1].Time.Equal(t0.Add(time.Duration(stuckSamples+6)*StuckSampleEvery)) {
		t.Fatalf("%d samples ending %v, want the last %d", len(got), got[len(got)-1].Time, stuckSamples)
	}
}
