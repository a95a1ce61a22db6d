package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// A log entry the FSM cannot decode or the store refuses is an error
// response, never a panic, and leaves the state untouched. (An entry of a
// type it does not know stops it: TestFSMStopsAtUnknownEntry.)
func TestFSMApplyBadEntries(t *testing.T) {
	s := state.NewStore()
	f := &fsm{store: s, meta: newMeta(), logger: hclog.NewNullLogger()}
	before, _ := s.Digest()
	good, err := encodeCommand(structs.ClaimGCType, time.Now(), &structs.ClaimGCRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		want func(error) bool
	}{
		{"empty", nil, func(err error) bool { return err != nil }},
		{"garbage body", []byte{byte(structs.NodeUpsertType), 'x', 'y'}, func(err error) bool { return err != nil }},
		{"refused by the store", good, func(err error) bool { var ve *structs.ValidationError; return errors.As(err, &ve) }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, ok := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: tc.data}).(fsmResult)
			if !ok || !tc.want(res.err) {
				t.Fatalf("response %+v", res)
			}
			if after, _ := s.Digest(); after != before {
				t.Fatal("state changed")
			}
		})
	}
}

// After Shutdown every operation fails with ErrNoLeader instead of hanging.
func TestOperationsAfterShutdown(t *testing.T) {
	c, _ := start(t, Config{Dev: true})
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if err := c.Barrier(testCtx(t)); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("barrier: %v", err)
	}
	if err := c.Snapshot(); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("snapshot: %v", err)
	}
	if c.IsLeader() {
		t.Fatal("leader after shutdown")
	}
}

type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

// The FSM restores snapshots with the cluster header, and those written
// before the header existed (a bare state store stream); a header of an
// unknown protocol version, or one that enabled a feature this binary
// does not know, is refused and changes nothing.
func TestFSMRestoreSnapshotFormats(t *testing.T) {
	src := state.NewStore()
	if _, err := src.ApplyAt(1, time.Now(), structs.NodeUpsertType, &structs.NodeUpsertRequest{
		Node: &structs.Node{ID: "n1", Status: structs.NodeReady}}); err != nil {
		t.Fatal(err)
	}
	var bare bytes.Buffer
	if err := src.Persist(&bare); err != nil {
		t.Fatal(err)
	}
	want, _ := src.Digest()
	hdr := func(version int, features ...EnabledFeature) string {
		b, _ := json.Marshal(snapshotHeader{Version: version, ClusterID: "c-1", Members: []Member{{ID: "s1", HTTPAddr: "h1"}}, Features: features})
		return string(b) + "\n"
	}
	tests := []struct {
		name      string
		stream    string
		ok        bool
		clusterID string
	}{
		{"bare store stream", bare.String(), true, ""},
		{"with cluster header", hdr(ProtocolVersion) + bare.String(), true, "c-1"},
		{"with enabled features", hdr(snapshotVersionFeatures, enabledOf(gates[0])) + bare.String(), true, "c-1"},
		{"unknown protocol version", hdr(snapshotVersionFeatures+1) + bare.String(), false, "old"},
		{"a feature this binary does not know", hdr(snapshotVersionFeatures, EnabledFeature{Name: "from-the-future", Since: "9.0.0"}) + bare.String(), false, "old"},
		{"header only", hdr(ProtocolVersion), false, "old"},
		{"garbage", "garbage\n", false, "old"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := state.NewStore()
			m := newMeta()
			m.restore(&snapshotHeader{ClusterID: "old"})
			f := &fsm{store: s, meta: m, logger: hclog.NewNullLogger()}
			before, _ := s.Digest()
			err := f.Restore(nopCloser{strings.NewReader(tc.stream)})
			if (err == nil) != tc.ok {
				t.Fatalf("restore: %v", err)
			}
			got, _ := s.Digest()
			switch {
			case tc.ok && got != want:
				t.Fatal("state not restored")
			case !tc.ok && got != before:
				t.Fatal("a refused snapshot changed the state")
			case m.clusterID() != tc.clusterID:
				t.Fatalf("cluster ID %q, want %q", m.clusterID(), tc.clusterID)
			}
		})
	}
}
