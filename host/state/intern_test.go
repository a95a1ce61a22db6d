package state

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/volhost/volhost/host/structs"
)

// Rows written from decoded requests (every string its own allocation, as
// strings.Clone makes them here) share one copy of each repeated value.
func TestStoredRowsShareRepeatedStrings(t *testing.T) {
	s := NewStore()
	c := strings.Clone
	idx := uint64(0)
	apply := func(mt structs.MessageType, req any) {
		t.Helper()
		idx++
		if _, err := s.ApplyAt(idx, t0, mt, req); err != nil {
			t.Fatal(err)
		}
	}
	apply(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "ebs", ControllerEndpoint: "tcp://127.0.0.1:9000"}})
	apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "node-1", Status: structs.NodeReady, LastSeen: t0,
		Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix:///csi.sock", ExternalNodeID: "i-1"}}}})
	var vols []*structs.Volume
	for _, id := range []string{"vol-1", "vol-2"} {
		vols = append(vols, &structs.Volume{Namespace: c("default"), ID: id, ExternalID: "disk-" + id, PluginID: c("ebs"),
			AccessMode: structs.AccessMode(c(string(structs.AccessSingleNodeWriter))), AttachmentMode: structs.AttachmentMode(c(string(structs.AttachFilesystem)))})
	}
	apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
	var allocs []*structs.Alloc
	for _, id := range []string{"a-1", "a-2"} {
		allocs = append(allocs, &structs.Alloc{ID: id, Namespace: c("default"), NodeID: c("node-1"), JobID: c("job"),
			ClientStatus: structs.AllocClientStatus(c(string(structs.AllocRunning)))})
	}
	apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
	for i, v := range []string{"vol-1", "vol-2"} {
		apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: v, Claim: &structs.Claim{
			AllocID: allocs[i].ID, NodeID: c("node-1"), Mode: structs.ClaimMode(c(string(structs.ClaimWrite))), State: structs.ClaimState(c(string(structs.ClaimTaken)))}})
	}

	snap := s.Snapshot()
	same := func(what string, a, b string) {
		t.Helper()
		if a != b || unsafe.StringData(a) != unsafe.StringData(b) {
			t.Errorf("%s: %q and %q are two copies", what, a, b)
		}
	}
	v1, _ := snap.VolumeByID(nil, "default", "vol-1")
	v2, _ := snap.VolumeByID(nil, "default", "vol-2")
	same("volume namespace", v1.Namespace, v2.Namespace)
	same("volume plugin", v1.PluginID, v2.PluginID)
	same("volume access mode", string(v1.AccessMode), string(structs.AccessSingleNodeWriter))
	same("volume attachment mode", string(v1.AttachmentMode), string(structs.AttachFilesystem))
	c1, c2 := v1.Claims["a-1"], v2.Claims["a-2"]
	same("claim node", c1.NodeID, c2.NodeID)
	same("claim mode", string(c1.Mode), string(structs.ClaimWrite))
	same("claim state", string(c1.State), string(structs.ClaimTaken))
	a1, _ := snap.AllocByID(nil, "a-1")
	a2, _ := snap.AllocByID(nil, "a-2")
	same("alloc node", a1.NodeID, a2.NodeID)
	same("alloc job", a1.JobID, a2.JobID)
	same("alloc status", string(a1.ClientStatus), string(structs.AllocRunning))
}
