package cluster

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// TestEncodeCommandEnvelope: the envelope encodeCommand writes by hand is
// byte for byte what json.Marshal of the envelope wrote before (issue 17),
// so entries already in logs and the ones written now read the same;
// strings json escapes (HTML characters, quotes, control characters)
// included, and a leader clock in another zone.
func TestEncodeCommandEnvelope(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 30, 45, 123456789, time.FixedZone("X", 3600))
	marshalled := func(typ structs.MessageType, req any) []byte {
		body, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		env, err := json.Marshal(envelope{Time: now.UTC(), Req: body})
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{byte(typ)}, env...)
	}
	reqs := map[structs.MessageType]any{}
	for typ := structs.MessageType(1); typ <= structs.VolumeClaimRemoveType; typ++ {
		req, err := newRequest(typ)
		if err != nil {
			t.Fatalf("type %d: %v", typ, err)
		}
		fill(reflect.ValueOf(req).Elem(), now)
		reqs[typ] = req
	}
	reqs[structs.ClaimCheckpointBatchType] = &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{{
		Namespace: "default", VolumeID: "v<1>&\"\u2028\x01", Free: true,
		Claim: &structs.Claim{AllocID: "a&b", State: structs.ClaimControllerDetached, ModifyTime: now},
	}}}
	for typ, req := range reqs {
		got, err := encodeCommand(typ, now, req)
		if err != nil {
			t.Fatal(err)
		}
		if want := marshalled(typ, req); !bytes.Equal(got, want) {
			t.Errorf("type %d:\n got %s\nwant %s", typ, got[1:], want[1:])
		}
	}
}
