package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// A log entry the FSM cannot decode or the store refuses is an error
// response, never a panic, and leaves the state untouched.
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
		{"unknown type", []byte{250, '{', '}'}, func(err error) bool { var ve *structs.ValidationError; return errors.As(err, &ve) }},
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
