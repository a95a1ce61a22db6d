package state

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// Committed entries and snapshot rows written by a version before the
// ASCII ID rule hold IDs that rule refuses ("vol+1", "nöde~1"): an
// upgraded server applies them and restores them (the old rule, no
// whitespace, control or format character, is the rule of stored IDs),
// and keeps working on them (a claim, its allocation turning terminal,
// a checkpoint), while the leader's check before the log refuses a new
// ID outside the ASCII rule with one validation error naming the field.
func TestLegacyIDsReplayAndRestore(t *testing.T) {
	f := newFixture(t)
	legacyNode := "nöde~1"
	legacyVol := &structs.Volume{Namespace: "team+a", ID: "vol+1", ExternalID: "vol-legacy", PluginID: "ebs",
		AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}
	// Replayed entries, as the FSM applies them.
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: legacyNode, Status: structs.NodeReady,
		Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", ExternalNodeID: "i-legacy"}}}})
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{legacyVol}})
	f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "alloc+1", Namespace: "team+a",
		NodeID: legacyNode, ClientStatus: structs.AllocRunning}}})
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "team+a", VolumeID: "vol+1",
		Claim: &structs.Claim{AllocID: "alloc+1", NodeID: legacyNode, Mode: structs.ClaimWrite, ExternalNodeID: "i-legacy"}})
	// After the upgrade, what names these rows is checked before the log
	// too, and passes: the allocation ends, the claim moves on.
	done := &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "alloc+1", Namespace: "team+a", NodeID: legacyNode, ClientStatus: structs.AllocComplete}}}
	if err := f.s.Snapshot().Validate(structs.AllocUpsertType, done); err != nil {
		t.Fatalf("the legacy allocation's end, before the log: %v", err)
	}
	f.must(structs.AllocUpsertType, done)
	cp := &structs.ClaimCheckpointRequest{Namespace: "team+a", VolumeID: "vol+1", Claim: &structs.Claim{AllocID: "alloc+1",
		NodeID: legacyNode, Mode: structs.ClaimWrite, ExternalNodeID: "i-legacy", State: structs.ClaimNodeDetached}}
	if err := f.s.Snapshot().Validate(structs.ClaimCheckpointType, cp); err != nil {
		t.Fatalf("the legacy claim's checkpoint, before the log: %v", err)
	}
	f.must(structs.ClaimCheckpointType, cp)

	// A snapshot holding them restores.
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	s2 := newEmpty(t).s
	if err := s2.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("restore of a snapshot with legacy IDs: %v", err)
	}
	if v, err := s2.Snapshot().VolumeByID(nil, "team+a", "vol+1"); err != nil || v == nil {
		t.Fatalf("restored legacy volume: %v, %v", v, err)
	}

	// A new ID outside the ASCII rule is refused before the log, with
	// one error naming the field and the character.
	for _, tc := range []struct {
		name  string
		typ   structs.MessageType
		req   any
		field string
	}{
		{"new volume", structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{Namespace: "default", ID: "vol+2",
			ExternalID: "vol-new", PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}}}, "volumes[0].id"},
		{"new volume in a legacy namespace", structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{Namespace: "team+a", ID: "vol2",
			ExternalID: "vol-new2", PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}}}, "volumes[0].namespace"},
		{"new node", structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "nöde2", Status: structs.NodeReady}}, "node.id"},
		{"new allocation", structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "alloc~2", NodeID: "n1", ClientStatus: structs.AllocRunning}}}, "allocs[0].id"},
		{"new plugin", structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "ebs\u3164"}}, "plugin.id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.digest()
			err := f.s.Snapshot().Validate(tc.typ, tc.req)
			var ve *structs.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field || !strings.Contains(ve.Msg, "is not allowed") {
				t.Fatalf("Validate: %v, want one validation error of %s", err, tc.field)
			}
			if f.digest() != before {
				t.Fatal("a refused request changed the state")
			}
		})
	}
	// What every version refused stays refused, committed or not.
	_, err := f.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n\u200b3", Status: structs.NodeReady}})
	var ve *structs.ValidationError
	if !errors.As(err, &ve) || ve.Field != "node.id" || !strings.Contains(ve.Msg, "U+200B") {
		t.Fatalf("a zero-width space, applied: %v, want refused", err)
	}
}
