package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
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

// TestStatsWholeStoreMatchesNamespaceWalks: the whole store's counts and
// stuck list, read from what the store keeps in step with its writes (the
// stats row, the stuck index, the claims table), equal the sum of walks
// of every namespace's volumes, after writes that move every count; and
// ?stuck=true pages through the stuck index to the same volumes a filter
// over every volume selects.
func TestStatsWholeStoreMatchesNamespaceWalks(t *testing.T) {
	st := state.NewStore()
	idx := uint64(0)
	apply := func(mt structs.MessageType, req any) {
		t.Helper()
		idx++
		if _, err := st.Apply(idx, mt, req); err != nil {
			t.Fatalf("apply %d: %v", mt, err)
		}
	}
	namespaces := []string{"default", "prod", "x"}
	apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p1"}})
	apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p2"}})
	var vols []*structs.Volume
	for i := range 60 {
		vols = append(vols, &structs.Volume{Namespace: namespaces[i%3], ID: fmt.Sprintf("v%02d", i), PluginID: []string{"p1", "p2"}[i%2],
			ExternalID: fmt.Sprintf("d%02d", i), AccessMode: structs.AccessMultiNodeMultiWrite, AttachmentMode: structs.AttachFilesystem})
	}
	apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
	for n := range 4 {
		apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: fmt.Sprintf("n%d", n), Status: structs.NodeReady}})
	}
	for i, v := range vols {
		for c := range i % 3 {
			alloc := fmt.Sprintf("a%02d-%d", i, c)
			node := fmt.Sprintf("n%d", (i+c)%4)
			apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: alloc, NodeID: node, ClientStatus: structs.AllocRunning}}})
			apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: v.Namespace, VolumeID: v.ID,
				Claim: &structs.Claim{AllocID: alloc, NodeID: node, Mode: structs.ClaimWrite, State: structs.ClaimTaken}})
		}
		if i%7 == 0 {
			apply(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: v.Namespace, VolumeID: v.ID,
				Stuck: &structs.Stuck{Reason: "r", Since: time.Unix(int64(1000-i), 0), Attempts: i}})
		}
	}
	// Unstick one, deregister one stuck and one claimed-free volume.
	apply(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: vols[7].Namespace, VolumeID: vols[7].ID})
	apply(structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: vols[0].Namespace, VolumeID: vols[0].ID})
	apply(structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: vols[3].Namespace, VolumeID: vols[3].ID})

	now := time.Now()
	whole, err := computeStats(nil, st.Snapshot(), "", now, &releaseWindow{})
	if err != nil {
		t.Fatal(err)
	}
	sum := &StatsResponse{ClaimsByState: map[structs.ClaimState]int{}, ClaimsByNode: map[string]int{},
		Plugins: map[string]int{}, Namespaces: map[string]int{}, Stuck: []StuckVolume{}}
	for _, ns := range namespaces {
		if err := countNamespace(nil, st.Snapshot(), ns, sum); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortStableFunc(sum.Stuck, func(a, b StuckVolume) int { return a.Stuck.Since.Compare(b.Stuck.Since) })
	if sum.Volumes != 58 || sum.StuckCount == 0 || len(sum.ClaimsByNode) != 4 {
		t.Fatalf("the walks count %d volumes, %d stuck, claims on %d nodes: the state is not what the test built", sum.Volumes, sum.StuckCount, len(sum.ClaimsByNode))
	}
	got := StatsResponse{Volumes: whole.Volumes, Claims: whole.Claims, ClaimsByState: whole.ClaimsByState, ClaimsByNode: whole.ClaimsByNode,
		StuckCount: whole.StuckCount, Stuck: whole.Stuck, Plugins: whole.Plugins, Namespaces: whole.Namespaces}
	want := StatsResponse{Volumes: sum.Volumes, Claims: sum.Claims, ClaimsByState: sum.ClaimsByState, ClaimsByNode: sum.ClaimsByNode,
		StuckCount: sum.StuckCount, Stuck: sum.Stuck, Plugins: sum.Plugins, Namespaces: sum.Namespaces}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("whole store %+v\nwalks of every namespace %+v", got, want)
	}

	// ?stuck=true, two at a time, against a filter over every volume.
	srv := httptest.NewServer(NewServer(Config{}, st, nil, nil).Handler())
	defer srv.Close()
	var wantIDs, gotIDs []string
	all, _ := st.Snapshot().Volumes(nil)
	for _, v := range all {
		if v.Stuck != nil {
			wantIDs = append(wantIDs, v.Namespace+"/"+v.ID)
		}
	}
	for token := ""; ; {
		resp, err := http.Get(srv.URL + "/v1/volumes?stuck=true&per_page=2&next_token=" + url.QueryEscape(token))
		if err != nil {
			t.Fatal(err)
		}
		var page []*structs.Volume
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("page after %q: %d %v", token, resp.StatusCode, err)
		}
		for _, v := range page {
			gotIDs = append(gotIDs, v.Namespace+"/"+v.ID)
		}
		if token = resp.Header.Get(NextTokenHeader); token == "" {
			break
		}
	}
	if len(wantIDs) < 3 || !slices.Equal(gotIDs, wantIDs) {
		t.Fatalf("?stuck=true pages %v, a filter over every volume %v", gotIDs, wantIDs)
	}
}

// TestNamespaceStatsCarryNothingOfOtherNamespaces: GET /v1/stats?namespace=
// is what a token that may read one namespace gets (namespace:read
// there); no count or series in it may come from another namespace. The
// stuck-over-time series is sampled for the whole store, so a "dev"
// reader saw "prod"'s stuck volumes come and go in it, while its own
// stuck count said 0.
func TestNamespaceStatsCarryNothingOfOtherNamespaces(t *testing.T) {
	st := state.NewStore()
	vols := []*structs.Volume{
		{Namespace: "dev", ID: "a", PluginID: "p", ExternalID: "d-a", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem},
		{Namespace: "prod", ID: "b", PluginID: "p", ExternalID: "d-b", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem},
	}
	if _, err := st.Apply(1, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(2, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(3, structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "prod", VolumeID: "b", Stuck: &structs.Stuck{Reason: "r"}}); err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{}, st, nil, nil)
	s.sampleStuck(time.Now())
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/stats?namespace=dev", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("stats: %d %s", rec.Code, rec.Body)
	}
	var out StatsResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Volumes != 1 || out.StuckCount != 0 || len(out.Stuck) != 0 || !reflect.DeepEqual(out.Namespaces, map[string]int{"dev": 1}) {
		t.Fatalf("dev's counts: %+v", out)
	}
	for _, x := range out.StuckSeries {
		if x.Count != 0 {
			t.Fatalf("dev's stuck-over-time counts prod's stuck volume: %+v", out.StuckSeries)
		}
	}
}
