package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// Every refusal returns one typed error naming what is wrong, from Validate
// and from Apply alike, and leaves the state byte-for-byte unchanged.
func TestRefusalsLeaveStateUnchanged(t *testing.T) {
	long := strings.Repeat("x", MaxIDLength+1)
	vol := func(mut func(v *structs.Volume)) *structs.Volume {
		v := &structs.Volume{Namespace: "default", ID: "new", ExternalID: "e", PluginID: "ebs",
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}
		mut(v)
		return v
	}
	claim := func(vol, alloc, node string, mode structs.ClaimMode) *structs.VolumeClaimRequest {
		return &structs.VolumeClaimRequest{Namespace: "default", VolumeID: vol,
			Claim: &structs.Claim{AllocID: alloc, NodeID: node, Mode: mode}}
	}
	tests := []struct {
		name  string
		setup func(f *fixture)
		typ   structs.MessageType
		req   any
		want  string // errKind
	}{
		{"unknown type", nil, 99, &structs.PluginUpsertRequest{}, "invalid:type"},
		{"wrong request type", nil, structs.PluginUpsertType, &structs.NodeUpsertRequest{}, "invalid:request"},
		{"nil request", nil, structs.PluginUpsertType, (*structs.PluginUpsertRequest)(nil), "invalid:request"},
		{"plugin missing", nil, structs.PluginUpsertType, &structs.PluginUpsertRequest{}, "invalid:plugin"},
		{"plugin empty id", nil, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{}}, "invalid:plugin.id"},
		{"plugin id with space", nil, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "a b"}}, "invalid:plugin.id"},
		{"plugin id with control char", nil, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "a\x01"}}, "invalid:plugin.id"},
		{"plugin id too long", nil, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: long}}, "invalid:plugin.id"},
		{"plugin bad endpoint", nil, structs.PluginUpsertType,
			&structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p", ControllerEndpoint: "http://x"}}, "invalid:plugin.controller_endpoint"},
		{"plugin tcp without port", nil, structs.PluginUpsertType,
			&structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p", ControllerEndpoint: "tcp://host"}}, "invalid:plugin.controller_endpoint"},
		{"plugin publish without controller", nil, structs.PluginUpsertType,
			&structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "p", Capabilities: structs.ControllerCapabilities{PublishUnpublish: true}}}, "invalid:plugin.controller_endpoint"},
		{"plugin deregister unknown", nil, structs.PluginDeregisterType, &structs.PluginDeregisterRequest{PluginID: "nope"}, "notfound"},
		{"plugin deregister in use", nil, structs.PluginDeregisterType, &structs.PluginDeregisterRequest{PluginID: "ebs"}, "conflict"},
		{"node bad status", nil, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n9", Status: "up"}}, "invalid:node.status"},
		{"node unknown plugin", nil, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n9", Status: structs.NodeReady,
			Plugins: map[string]*structs.NodePlugin{"zfs": {PluginID: "zfs"}}}}, "notfound"},
		{"node plugin key mismatch", nil, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n9", Status: structs.NodeReady,
			Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "nfs"}}}}, "invalid:node.plugins[ebs].plugin_id"},
		{"node plugin bad endpoint", nil, structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n9", Status: structs.NodeReady,
			Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix://"}}}}, "invalid:node.plugins[ebs].endpoint"},
		{"node status unknown node", nil, structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n9", Status: structs.NodeDown}, "notfound"},
		{"node status bad", nil, structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n1", Status: "gone"}, "invalid:status"},
		{"node deregister with live allocs", nil, structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: "n1"}, "conflict"},
		{"node deregister unknown", nil, structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: "n9"}, "notfound"},
		{"volume register empty", nil, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{}, "invalid:volumes"},
		{"volume unknown plugin", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.PluginID = "zfs" })}}, "notfound"},
		{"volume bad access mode", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.AccessMode = "rw" })}}, "invalid:volumes[0].access_mode"},
		{"volume bad attachment mode", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.AttachmentMode = "fs" })}}, "invalid:volumes[0].attachment_mode"},
		{"volume no external id", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.ExternalID = "" })}}, "invalid:volumes[0].external_id"},
		{"volume empty namespace", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.Namespace = "" })}}, "invalid:volumes[0].namespace"},
		{"volume with claims", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.Claims = map[string]*structs.Claim{"a1": {}} })}}, "invalid:volumes[0].claims"},
		{"volume twice", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(*structs.Volume) {}), vol(func(*structs.Volume) {})}}, "invalid:volumes[1].id"},
		{"volume second invalid refuses whole batch", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(*structs.Volume) {}), vol(func(v *structs.Volume) { v.ID = "b"; v.PluginID = "" })}}, "invalid:volumes[1].plugin_id"},
		{"volume re-register changes claimed spec", func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite) }, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.ID = "vol-sw"; v.ExternalID = "other" })}}, "conflict"},
		// One disk, one volume: a second volume on vol-sw's disk.
		{"volume on a registered disk", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.ExternalID = "vol-0aaa" })}}, "conflict"},
		{"volume on a registered disk in another namespace", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.Namespace = "prod"; v.ExternalID = "vol-0aaa" })}}, "conflict"},
		{"one disk twice in a request", nil, structs.VolumeRegisterType,
			&structs.VolumeRegisterRequest{Volumes: []*structs.Volume{vol(func(v *structs.Volume) { v.ExternalID = "d" }), vol(func(v *structs.Volume) { v.ID = "b"; v.ExternalID = "d" })}}, "invalid:volumes[1].external_id"},
		{"deregister unknown", nil, structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "nope"}, "notfound"},
		{"deregister in use", func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite) }, structs.VolumeDeregisterType,
			&structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-sw"}, "conflict"},
		{"deregister in use by terminal alloc", func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite); f.setAlloc("a1", structs.AllocComplete) },
			structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-sw"}, "conflict"},
		{"force deregister with live alloc", func(f *fixture) {
			f.claim("vol-mw", "a1", structs.ClaimWrite)
			f.claim("vol-mw", "a2", structs.ClaimWrite)
			f.setAlloc("a1", structs.AllocComplete)
		},
			structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-mw", Force: true}, "conflict"},
		{"alloc unknown node", nil, structs.AllocUpsertType,
			&structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "a9", NodeID: "n9", ClientStatus: structs.AllocRunning}}}, "notfound"},
		{"alloc bad status", nil, structs.AllocUpsertType,
			&structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "a9", NodeID: "n1", ClientStatus: "done"}}}, "invalid:allocs[0].client_status"},
		{"alloc moves node", nil, structs.AllocUpsertType,
			&structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "a1", NodeID: "n2", ClientStatus: structs.AllocRunning}}}, "invalid:allocs[0].node_id"},
		{"alloc terminal comes back", nil, structs.AllocUpsertType,
			&structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "a3", NodeID: "n1", ClientStatus: structs.AllocRunning}}}, "conflict"},
		{"alloc delete unknown", nil, structs.AllocDeleteType, &structs.AllocDeleteRequest{AllocIDs: []string{"a9"}}, "notfound"},
		{"alloc delete live", nil, structs.AllocDeleteType, &structs.AllocDeleteRequest{AllocIDs: []string{"a3", "a1"}}, "conflict"},
		{"alloc delete empty", nil, structs.AllocDeleteType, &structs.AllocDeleteRequest{}, "invalid:alloc_ids"},
		{"claim unknown volume", nil, structs.VolumeClaimType, claim("nope", "a1", "n1", structs.ClaimWrite), "notfound"},
		{"claim unknown alloc", nil, structs.VolumeClaimType, claim("vol-sw", "a9", "n1", structs.ClaimWrite), "invalid:claim.alloc_id"},
		{"claim missing", nil, structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw"}, "invalid:claim"},
		{"claim bad mode", nil, structs.VolumeClaimType, claim("vol-sw", "a1", "n1", "rw"), "invalid:claim.mode"},
		{"claim terminal alloc", nil, structs.VolumeClaimType, claim("vol-sw", "a3", "n1", structs.ClaimWrite), "conflict"},
		{"claim node mismatch", nil, structs.VolumeClaimType, claim("vol-sw", "a1", "n2", structs.ClaimWrite), "invalid:claim.node_id"},
		{"claim namespace mismatch", nil, structs.VolumeClaimType, claim("vol-mw", "a6", "n3", structs.ClaimRead), "invalid:claim.alloc_id"},
		{"claim write on reader-only", nil, structs.VolumeClaimType, claim("vol-ro", "a1", "n1", structs.ClaimWrite), "invalid:claim.mode"},
		{"claim write on single-node-reader", nil, structs.VolumeClaimType, claim("vol-snr", "a1", "n1", structs.ClaimWrite), "invalid:claim.mode"},
		{"claim access mode mismatch", nil, structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
			Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimRead, AccessMode: structs.AccessMultiNodeReader}}, "invalid:claim.access_mode"},
		{"claim not at taken", nil, structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
			Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimRead, State: structs.ClaimNodeDetached}}, "invalid:claim.state"},
		{"claim second writer single-node", func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite) }, structs.VolumeClaimType,
			claim("vol-sw", "a5", "n1", structs.ClaimWrite), "conflict"},
		{"claim second writer multi-node-single-writer", func(f *fixture) { f.claim("vol-ms", "a1", structs.ClaimWrite) }, structs.VolumeClaimType,
			claim("vol-ms", "a2", "n2", structs.ClaimWrite), "conflict"},
		{"claim single-node on other node", func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimRead) }, structs.VolumeClaimType,
			claim("vol-sw", "a2", "n2", structs.ClaimRead), "conflict"},
		{"claim duplicate", func(f *fixture) { f.claim("vol-mw", "a1", structs.ClaimWrite) }, structs.VolumeClaimType,
			claim("vol-mw", "a1", "n1", structs.ClaimRead), "conflict"},
		{"claim on stuck volume", func(f *fixture) {
			f.must(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-mw", Stuck: &structs.Stuck{Reason: "driver down"}})
		}, structs.VolumeClaimType, claim("vol-mw", "a1", "n1", structs.ClaimWrite), "conflict"},
		{"claim on down node", func(f *fixture) {
			f.must(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n2", Status: structs.NodeDown})
		}, structs.VolumeClaimType, claim("vol-mw", "a2", "n2", structs.ClaimWrite), "conflict"},
		{"checkpoint unknown claim", nil, structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw",
			Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimTaken}}, "notfound"},
		{"checkpoint bad state", func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite) }, structs.ClaimCheckpointType,
			&structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: "gone"}}, "invalid:claim.state"},
		{"checkpoint while alloc runs", func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite) }, structs.ClaimCheckpointType,
			&structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimNodeDetached}}, "conflict"},
		{"checkpoint while alloc pending", func(f *fixture) { f.claim("vol-sw", "a4", structs.ClaimWrite) }, structs.ClaimCheckpointType,
			&structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: &structs.Claim{AllocID: "a4", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimReadyToFree}}, "conflict"},
		{"checkpoint backwards", func(f *fixture) {
			f.claim("vol-sw", "a1", structs.ClaimWrite)
			f.setAlloc("a1", structs.AllocComplete)
			if err := f.checkpoint("vol-sw", "a1", structs.ClaimControllerDetached); err != nil {
				f.t.Fatal(err)
			}
		}, structs.ClaimCheckpointType,
			&structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimNodeDetached}}, "conflict"},
		{"checkpoint changes node", func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite) }, structs.ClaimCheckpointType,
			&structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: &structs.Claim{AllocID: "a1", NodeID: "n2", Mode: structs.ClaimWrite, State: structs.ClaimTaken}}, "invalid:claim.node_id"},
		{"claim remove unknown", nil, structs.VolumeClaimRemoveType, &structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: "vol-sw", AllocID: "a1"}, "notfound"},
		{"stuck without reason", nil, structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-sw", Stuck: &structs.Stuck{}}, "invalid:stuck.reason"},
		{"stuck unknown volume", nil, structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "nope"}, "notfound"},
		{"gc empty", nil, structs.ClaimGCType, &structs.ClaimGCRequest{}, "invalid:volumes"},
		{"gc bad id", nil, structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: ""}}}, "invalid:volumes[0].volume_id"},
		{"leftovers clear nothing", nil, structs.LeftoversClearType, &structs.LeftoversClearRequest{}, "invalid:ids"},
		{"leftovers clear unknown", nil, structs.LeftoversClearType, &structs.LeftoversClearRequest{IDs: []string{"x"}}, "notfound"},
		{"leftovers all and ids", nil, structs.LeftoversClearType, &structs.LeftoversClearRequest{IDs: []string{"x"}, All: true}, "invalid:all"},
		{"events empty", nil, structs.EventAppendType, &structs.EventAppendRequest{}, "invalid:events"},
		{"event without type", nil, structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Message: "m"}}}, "invalid:events[0].type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			before := f.digest()
			latest := f.s.LatestIndex()

			verr := f.s.Snapshot().Validate(tc.typ, tc.req)
			if got := errKind(verr); got != tc.want {
				t.Fatalf("Validate: got %s (%v), want %s", got, verr, tc.want)
			}
			_, aerr := f.apply(tc.typ, tc.req)
			if got := errKind(aerr); got != tc.want {
				t.Fatalf("Apply: got %s (%v), want %s", got, aerr, tc.want)
			}
			if aerr.Error() != verr.Error() {
				t.Errorf("Apply and Validate disagree: %q vs %q", aerr, verr)
			}
			if after := f.digest(); after != before {
				t.Errorf("refused request changed the state")
			}
			if f.s.LatestIndex() != latest {
				t.Errorf("refused request moved the latest index")
			}
		})
	}
}

// The error text names the offending thing, so an operator can act on it.
func TestRefusalMessagesNameTheCulprit(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-mw", "a1", structs.ClaimWrite)
	f.claim("vol-mw", "a2", structs.ClaimWrite)
	f.setAlloc("a1", structs.AllocComplete)
	_, err := f.apply(structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-mw", Force: true})
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "a2") || strings.Contains(err.Error(), "a1") {
		t.Fatalf("force deregister refusal should name live alloc a2 only: %v", err)
	}
	_, err = f.apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
		Claim: &structs.Claim{AllocID: "a1 ", NodeID: "n1", Mode: structs.ClaimWrite}})
	var ve *structs.ValidationError
	if !errors.As(err, &ve) || ve.Field != "claim.alloc_id" || !strings.Contains(ve.Msg, "U+0020") {
		t.Fatalf("want the space refused on claim.alloc_id, got %v", err)
	}
}

// TestOneVolumePerDiskAllows: the one-volume-per-disk check refuses only a
// second volume on the same plugin's disk: re-registering the volume itself
// and the same external ID on another plugin are accepted.
func TestOneVolumePerDiskAllows(t *testing.T) {
	for _, v := range []*structs.Volume{
		{Namespace: "default", ID: "vol-sw", ExternalID: "vol-0aaa", PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem},
		{Namespace: "default", ID: "other", ExternalID: "vol-0aaa", PluginID: "nfs", AccessMode: structs.AccessMultiNodeReader, AttachmentMode: structs.AttachFilesystem},
	} {
		f := newFixture(t)
		if _, err := f.apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{v}}); err != nil {
			t.Errorf("register %s/%s on %s disk %s: %v", v.Namespace, v.ID, v.PluginID, v.ExternalID, err)
		}
	}
}

// TestOneVolumePerDiskNamesNoOtherNamespace: registering a disk that a
// volume of another namespace already has is refused (one disk, one
// volume), but the refusal does not name that volume: a token that may
// register in "dev" learned the IDs of "prod"'s volumes by trying disks.
// In its own namespace it is named, to deregister it.
func TestOneVolumePerDiskNamesNoOtherNamespace(t *testing.T) {
	f := newFixture(t)
	secret := &structs.Volume{Namespace: "prod", ID: "payroll-db", ExternalID: "disk-9", PluginID: "ebs",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{secret}})
	probe := *secret
	probe.Namespace, probe.ID = "dev", "probe"
	err := f.s.Snapshot().Validate(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{&probe}})
	if !errors.Is(err, structs.ErrConflict) || strings.Contains(err.Error(), "payroll") || strings.Contains(err.Error(), "prod") {
		t.Fatalf("a second volume on prod's disk from dev: %v, want a conflict naming no prod volume", err)
	}
	same := *secret
	same.ID = "copy"
	err = f.s.Snapshot().Validate(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{&same}})
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "prod/payroll-db") {
		t.Fatalf("a second volume on the disk in its own namespace: %v, want a conflict naming the volume", err)
	}
}
