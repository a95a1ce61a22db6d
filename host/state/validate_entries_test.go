package state

import (
	"errors"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// TestBatchWritesRefuseEmptyAndNullEntries pins the words of the one rule
// every batch write's list is checked by (entries): an empty list and a
// null entry are refused where the write is committed, naming the entry.
func TestBatchWritesRefuseEmptyAndNullEntries(t *testing.T) {
	f := newFixture(t)
	before := f.digest()
	for _, c := range []struct {
		t    structs.MessageType
		req  any
		want string
	}{
		{structs.VolumeRegisterType, &structs.VolumeRegisterRequest{}, "volumes: at least one volume is required"},
		{structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{nil}}, "volumes[0]: is null"},
		{structs.AllocUpsertType, &structs.AllocUpsertRequest{}, "allocs: at least one allocation is required"},
		{structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{nil}}, "allocs[0]: is null"},
		{structs.EventAppendType, &structs.EventAppendRequest{}, "events: at least one event is required"},
		{structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{{Type: "x"}, nil}}, "events[1]: is null"},
		{structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{}, "policies: at least one policy is required"},
		{structs.ACLPolicyUpsertType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{nil}}, "policies[0]: is null"},
	} {
		_, err := f.apply(c.t, c.req)
		var ve *structs.ValidationError
		if !errors.As(err, &ve) || ve.Field+": "+ve.Msg != c.want {
			t.Errorf("message type %d: err %v, want a validation error %q", c.t, err, c.want)
		}
	}
	if f.digest() != before {
		t.Error("a refused batch write changed the state")
	}
}
