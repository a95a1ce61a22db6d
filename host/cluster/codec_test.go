package cluster

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// TestEncodeCommandEnvelope: the envelope encodeCommand writes by hand is
// byte for byte what json.Marshal of the envelope wrote before,
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
		testutil.Fill(reflect.ValueOf(req).Elem(), now)
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

// envelopeDecode is decodeCommand without its split: the envelope decoded
// as JSON, as every entry was before decodeCommand split it.
func envelopeDecode(data []byte) (structs.MessageType, time.Time, any, error) {
	t := structs.MessageType(data[0])
	req, err := newRequest(t)
	if err != nil {
		return t, time.Time{}, nil, err
	}
	var env envelope
	if err := json.Unmarshal(data[1:], &env); err != nil {
		return t, time.Time{}, nil, err
	}
	if err := json.Unmarshal(env.Req, req); err != nil {
		return t, time.Time{}, nil, err
	}
	return t, env.Time, req, nil
}

// checkSameDecode: decodeCommand answers what the envelope decoding does,
// the same request and time or an error for both.
func checkSameDecode(t *testing.T, data []byte) {
	t.Helper()
	if len(data) < 2 {
		return
	}
	gt, gat, greq, gerr := decodeCommand(data)
	wt, wat, wreq, werr := envelopeDecode(data)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%q: decodeCommand error %v, envelope decoding error %v", data, gerr, werr)
	}
	if gerr != nil {
		return
	}
	if gt != wt || !gat.Equal(wat) || gat.Location().String() != wat.Location().String() || !reflect.DeepEqual(greq, wreq) {
		t.Fatalf("%q: decodeCommand gave %d %v %+v, envelope decoding %d %v %+v", data, gt, gat, greq, wt, wat, wreq)
	}
}

// Every entry encodeCommand writes takes the split (no second scan and
// copy of the request), and envelopes of any other shape still decode as
// they did: other key order, whitespace, escapes in the time, a key
// repeated after the request, trailing bytes, a broken request.
func TestDecodeCommandSplitsEnvelope(t *testing.T) {
	now := time.Date(2026, 12, 2, 4, 30, 0, 123456789, time.UTC)
	batch := &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{{
		Namespace: "default", VolumeID: "v<1>&\"}\u2028", Free: true, Term: 7,
		Claim: &structs.Claim{AllocID: "a\\b\"", State: structs.ClaimControllerDetached, ModifyTime: now},
	}}}
	entries := [][]byte{}
	for typ := structs.MessageType(1); typ <= structs.VolumeClaimRemoveType; typ++ {
		req, err := newRequest(typ)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Fill(reflect.ValueOf(req).Elem(), now)
		data, err := encodeCommand(typ, now, req)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, data)
	}
	data, err := encodeCommand(structs.ClaimCheckpointBatchType, now, batch)
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, data)
	for _, data := range entries {
		if _, _, ok := splitEnvelope(data[1:]); !ok {
			t.Errorf("type %d: encodeCommand's entry %q does not take the split", data[0], data[1:])
		}
		checkSameDecode(t, data)
	}
	// The split is what saves: fewer allocations than the envelope's
	// decoding of the same entry (counts, not times).
	split := testing.AllocsPerRun(50, func() { _, _, _, _ = decodeCommand(data) })
	full := testing.AllocsPerRun(50, func() { _, _, _, _ = envelopeDecode(data) })
	if split >= full {
		t.Errorf("decodeCommand allocates %.0f objects per checkpoint batch entry, the envelope decoding %.0f: want fewer", split, full)
	}
	typ := byte(structs.ClaimCheckpointBatchType)
	body, err := json.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	at := `"2026-12-02T04:30:00.123456789Z"`
	for _, env := range []string{
		`{"req":` + string(body) + `,"time":` + at + `}`,
		`{ "time":` + at + `,"req":` + string(body) + `}`,
		`{"time":` + at + `, "req":` + string(body) + ` }`,
		`{"time":"2026-12-02T04:30:00\u002e5Z","req":` + string(body) + `}`,
		`{"time":` + at + `,"req":` + string(body) + `,"time":"2027-01-01T00:00:00Z"}`,
		`{"time":` + at + `,"req":` + string(body) + `}}`,
		`{"time":` + at + `,"req":` + string(body) + `x}`,
		`{"time":` + at + `,"req":{"checkpoints":[}`,
		`{"time":` + at + `,"req":}`,
		`{"time":"not a time","req":` + string(body) + `}`,
		`{"time":` + at + `,"req":null}`,
		`{"time":` + at + `}`,
		`{"time":"`,
		`}`,
	} {
		checkSameDecode(t, append([]byte{typ}, env...))
	}
}

// FuzzDecodeCommand: decodeCommand and the envelope decoding agree on any
// bytes.
func FuzzDecodeCommand(f *testing.F) {
	now := time.Date(2026, 12, 2, 4, 30, 0, 1, time.UTC)
	for _, req := range []any{
		&structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{{Namespace: "n", VolumeID: "v", Claim: &structs.Claim{AllocID: "a"}}}},
		&structs.VolumeClaimRemoveRequest{Namespace: "n", VolumeID: "v", AllocID: "a"},
	} {
		typ := structs.ClaimCheckpointBatchType
		if _, ok := req.(*structs.VolumeClaimRemoveRequest); ok {
			typ = structs.VolumeClaimRemoveType
		}
		data, err := encodeCommand(typ, now, req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkSameDecode(t, data) })
}
