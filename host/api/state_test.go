package api_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// realStore is a state.Store with a plugin and one volume, on a fake clock
// so a test can see a blocking query park (its maxWait timer registers).
func realStore(t *testing.T) (*state.Store, *clockwork.FakeClock, *httptest.Server) {
	t.Helper()
	clk := clockwork.NewFakeClock()
	st := state.NewStore(state.WithClock(clk))
	apply(t, st, 1, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "gce-pd", ControllerEndpoint: "unix:///c.sock"}})
	apply(t, st, 2, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("vol1")}})
	ts := httptest.NewServer(api.NewServer(api.Config{}, st, &fakeBackend{}, nil).Handler())
	t.Cleanup(ts.Close)
	return st, clk, ts
}

func testVolume(id string) *structs.Volume {
	return &structs.Volume{Namespace: "default", ID: id, ExternalID: "disk-" + id, PluginID: "gce-pd",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}
}

func apply(t *testing.T, st *state.Store, index uint64, mt structs.MessageType, req any) {
	t.Helper()
	if _, err := st.Apply(index, mt, req); err != nil {
		t.Fatalf("apply %d: %v", mt, err)
	}
}

func TestRealStoreBlockingQueryWakesOnWrite(t *testing.T) {
	tests := []struct {
		name, path string
		write      func(t *testing.T, st *state.Store)
		want       string
	}{
		{"volume list", "/v1/volumes?index=2", func(t *testing.T, st *state.Store) {
			apply(t, st, 3, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("vol2")}})
		}, `"id": "vol2"`},
		{"one volume", "/v1/volume/vol1?index=2&wait=1m", func(t *testing.T, st *state.Store) {
			v := testVolume("vol1")
			v.Name = "renamed"
			apply(t, st, 3, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{v}})
		}, `"name": "renamed"`},
		// The whole cluster's stats read the stats row and the stuck
		// table, not the volumes: their watches must still wake it.
		{"stats, a volume registered", "/v1/stats?index=2", func(t *testing.T, st *state.Store) {
			apply(t, st, 3, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{testVolume("vol2")}})
		}, `"volumes": 2,`},
		{"stats, a volume stuck", "/v1/stats?index=2", func(t *testing.T, st *state.Store) {
			apply(t, st, 3, structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol1", Stuck: &structs.Stuck{Reason: "r"}})
		}, `"stuck_count": 1,`},
		{"stuck volumes", "/v1/volumes?stuck=true&index=2", func(t *testing.T, st *state.Store) {
			apply(t, st, 3, structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol1", Stuck: &structs.Stuck{Reason: "r"}})
		}, `"id": "vol1"`},
		{"nodes", "/v1/nodes?index=2", func(t *testing.T, st *state.Store) {
			apply(t, st, 3, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady}})
		}, `"id": "n1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, clk, ts := realStore(t)
			got := make(chan response, 1)
			go func() { got <- doCtx(t, context.Background(), ts.URL, "GET", tt.path, "") }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := clk.BlockUntilContext(ctx, 1); err != nil { // the query's maxWait timer
				t.Fatalf("query never parked: %v", err)
			}
			tt.write(t, st)
			r := <-got
			if r.status != 200 || r.header.Get(api.IndexHeader) != "3" || !strings.Contains(r.body, tt.want) {
				t.Fatalf("after write: %d index %q: %s", r.status, r.header.Get(api.IndexHeader), r.body)
			}
		})
	}
}

func TestRealStoreBlockingQueryTimesOut(t *testing.T) {
	_, clk, ts := realStore(t)
	got := make(chan response, 1)
	go func() { got <- doCtx(t, context.Background(), ts.URL, "GET", "/v1/volumes?index=2&wait=30s", "") }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := clk.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Second)
	r := <-got
	// When wait passes with no change the answer is the unchanged one.
	if r.status != 200 || r.header.Get(api.IndexHeader) != "2" || !strings.Contains(r.body, `"id": "vol1"`) {
		t.Fatalf("after wait: %d index %q: %s", r.status, r.header.Get(api.IndexHeader), r.body)
	}
}
