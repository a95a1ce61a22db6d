package cluster

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// checkpointBodies are request bodies of both checkpoint types as
// json.Marshal writes them: every field set (fill), a release's usual
// claims, and the empty and absent cases.
func checkpointBodies(t testing.TB) map[structs.MessageType][][]byte {
	t.Helper()
	now := time.Date(2026, 12, 3, 13, 0, 36, 461637716, time.UTC)
	full := &structs.ClaimCheckpointRequest{}
	testutil.Fill(reflect.ValueOf(full).Elem(), now)
	usual := &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "b1-v0001", Term: 3, Unstaged: true,
		Claim: &structs.Claim{AllocID: "a-b1-v0001", NodeID: "node1", Mode: structs.ClaimWrite,
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
			State:          structs.ClaimNodeDetached,
			PublishContext: map[string]string{"device": "/dev/csitest/disk-b1-v0001"},
			StagingPath:    "/var/lib/volhost/csi/gcepd/staging/default/b1-v0001",
			TargetPath:     "/var/lib/volhost/csi/gcepd/per-alloc/a-b1-v0001/default/b1-v0001",
			// A zone other than UTC, and a time json.Marshal writes without
			// a fraction.
			CreateTime: now.In(time.FixedZone("", 3600)), ModifyTime: now.Truncate(time.Second), CreateIndex: 5, ModifyIndex: 9,
			LastError: &structs.ClaimError{Kind: "csi", Step: "controller-unpublish", Code: 14, CodeName: "Unavailable",
				Message: "connection refused", Time: now},
		}}
	failing := &structs.ClaimCheckpointRequest{Namespace: "n", VolumeID: "v", Claim: &structs.Claim{AllocID: "a", Attempts: -3,
		Hold: &structs.ClaimHold{Reason: "grace", Since: now}, PublishContext: map[string]string{}}}
	bare := &structs.ClaimCheckpointRequest{}
	out := map[structs.MessageType][][]byte{}
	for _, r := range []*structs.ClaimCheckpointRequest{full, usual, failing, bare} {
		out[structs.ClaimCheckpointType] = append(out[structs.ClaimCheckpointType], mustMarshal(t, r))
	}
	for _, b := range []*structs.ClaimCheckpointBatchRequest{
		{Checkpoints: []*structs.ClaimCheckpointRequest{full, usual, failing}},
		{Checkpoints: []*structs.ClaimCheckpointRequest{}},
		{},
	} {
		out[structs.ClaimCheckpointBatchType] = append(out[structs.ClaimCheckpointBatchType], mustMarshal(t, b))
	}
	return out
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSameCheckpoint fails when decodeCheckpoint takes body and decodes
// it other than encoding/json does, or takes a body encoding/json refuses.
// It reports whether the fast path took it.
func checkSameCheckpoint(t *testing.T, typ structs.MessageType, body []byte) bool {
	t.Helper()
	got, ok := decodeCheckpoint(typ, body)
	if !ok {
		return false
	}
	want, err := newRequest(typ)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, want); err != nil {
		t.Fatalf("type %d %q: decodeCheckpoint took what encoding/json refuses: %v", typ, body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("type %d %q: decodeCheckpoint gave\n%+v\nencoding/json\n%+v", typ, body, got, want)
	}
	return true
}

// What json.Marshal writes for a checkpoint takes the fast path, every
// field included: a field added to the checkpoint or the claim without
// its case here fails this test instead of quietly sending every entry
// back to encoding/json. And it is the cheaper path (allocations, not
// times).
func TestDecodeCheckpointTakesEncodedEntries(t *testing.T) {
	for typ, bodies := range checkpointBodies(t) {
		for _, body := range bodies {
			if !checkSameCheckpoint(t, typ, body) {
				t.Errorf("type %d: %s does not take the fast path", typ, body)
			}
			data, err := encodeCommand(typ, time.Now(), json.RawMessage(body))
			if err != nil {
				t.Fatal(err)
			}
			checkSameDecode(t, data)
		}
	}
	usual := checkpointBodies(t)[structs.ClaimCheckpointType][1]
	data, err := encodeCommand(structs.ClaimCheckpointType, time.Now(), json.RawMessage(usual))
	if err != nil {
		t.Fatal(err)
	}
	fast := testing.AllocsPerRun(50, func() { _, _, _, _ = decodeCommand(data) })
	slow := testing.AllocsPerRun(50, func() {
		req := &structs.ClaimCheckpointRequest{}
		_ = json.Unmarshal(usual, req)
	})
	t.Logf("allocs: fast %.0f, encoding/json %.0f", fast, slow)
	if fast >= slow {
		t.Errorf("decodeCommand allocates %.0f objects per checkpoint entry, encoding/json %.0f for its request alone: want fewer", fast, slow)
	}
}

// Every shape the fast path does not reproduce exactly is left to
// encoding/json (refused here), the edges it does take decode as
// encoding/json decodes them, and decodeCommand still decodes each entry
// as the envelope decoding does, or refuses it the same.
func TestDecodeCheckpointEdges(t *testing.T) {
	taken := map[string]bool{"uint64 max": true, "int min": true, "minus zero": true, "repeated map key": true, "empty object": true,
		"null claim": true, "null map": true, "escape in a string": true, "escaped quote": true}
	usual := string(checkpointBodies(t)[structs.ClaimCheckpointType][1])
	for name, body := range map[string]string{
		"white space":           strings.Replace(usual, `"namespace":`, `"namespace": `, 1),
		"leading space":         " " + usual,
		"escape in a string":    strings.Replace(usual, `"b1-v0001"`, `"b1\u002dv0001"`, 1),
		"escaped quote":         strings.Replace(usual, `connection refused`, `say \"no\"`, 1),
		"escape beyond ASCII":   strings.Replace(usual, `node1`, `n\u00f6de1`, 1),
		"non-ASCII":             strings.Replace(usual, `node1`, `nöde1`, 1),
		"invalid UTF-8":         strings.Replace(usual, `node1`, "node\xff", 1),
		"control character":     strings.Replace(usual, `node1`, "node\x01", 1),
		"repeated key":          strings.Replace(usual, `"namespace":"default"`, `"namespace":"default","namespace":"other"`, 1),
		"repeated claim":        strings.Replace(usual, `,"term":3`, `,"claim":{"node_id":"n2"},"term":3`, 1),
		"key in other case":     strings.Replace(usual, `"volume_id"`, `"Volume_ID"`, 1),
		"unknown key":           strings.Replace(usual, `"term":3`, `"term":3,"extra":1`, 1),
		"null claim":            `{"namespace":"n","claim":null}`,
		"null string":           `{"namespace":null}`,
		"null map":              `{"claim":{"publish_context":null}}`,
		"float":                 strings.Replace(usual, `"term":3`, `"term":3.0`, 1),
		"exponent":              strings.Replace(usual, `"term":3`, `"term":3e0`, 1),
		"leading zero":          strings.Replace(usual, `"term":3`, `"term":03`, 1),
		"negative uint":         strings.Replace(usual, `"term":3`, `"term":-3`, 1),
		"uint64 overflow":       strings.Replace(usual, `"term":3`, `"term":18446744073709551616`, 1),
		"uint64 max":            strings.Replace(usual, `"term":3`, `"term":18446744073709551615`, 1),
		"uint32 overflow":       strings.Replace(usual, `"code":14`, `"code":4294967296`, 1),
		"int overflow":          `{"claim":{"attempts":9223372036854775808}}`,
		"int min":               `{"claim":{"attempts":-9223372036854775808}}`,
		"int below min":         `{"claim":{"attempts":-9223372036854775809}}`,
		"minus zero":            `{"claim":{"attempts":-0}}`,
		"bare minus":            `{"claim":{"attempts":-}}`,
		"string for bool":       strings.Replace(usual, `"unstaged":true`, `"unstaged":"true"`, 1),
		"bool prefix":           strings.Replace(usual, `"unstaged":true`, `"unstaged":truex`, 1),
		"bad time":              strings.Replace(usual, `"next_attempt":"0001-01-01T00:00:00Z"`, `"next_attempt":"yesterday"`, 1),
		"time as number":        strings.Replace(usual, `"next_attempt":"0001-01-01T00:00:00Z"`, `"next_attempt":0`, 1),
		"trailing comma":        strings.Replace(usual, `,"term":3`, `,"term":3,`, 1),
		"trailing bytes":        usual + "x",
		"second value":          usual + "{}",
		"truncated":             usual[:len(usual)-1],
		"unterminated string":   `{"namespace":"n`,
		"array for object":      `[]`,
		"empty":                 ``,
		"null body":             `null`,
		"map value number":      `{"claim":{"publish_context":{"a":1}}}`,
		"repeated map key":      `{"claim":{"publish_context":{"a":"1","a":"2"}}}`,
		"empty object":          `{}`,
		"missing colon":         `{"namespace" "n"}`,
		"comma first":           `{,"namespace":"n"}`,
		"repeated error field":  `{"claim":{"last_error":{"code":1,"code":2}}}`,
		"hold with unknown key": `{"claim":{"hold":{"who":"x"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			bodies := map[structs.MessageType]string{
				structs.ClaimCheckpointType:      body,
				structs.ClaimCheckpointBatchType: `{"checkpoints":[` + body + `]}`,
			}
			one := checkSameCheckpoint(t, structs.ClaimCheckpointType, []byte(bodies[structs.ClaimCheckpointType]))
			batch := checkSameCheckpoint(t, structs.ClaimCheckpointBatchType, []byte(bodies[structs.ClaimCheckpointBatchType]))
			// In a batch an empty body is an empty array, and null a nil
			// element, which encoding/json decodes the same.
			if one != taken[name] || batch != (taken[name] || body == "" || body == "null") {
				t.Errorf("fast path took it alone: %v, in a batch: %v; want %v", one, batch, taken[name])
			}
			for typ, b := range bodies {
				checkSameDecode(t, append([]byte{byte(typ)}, `{"time":"2026-12-03T13:00:00Z","req":`+b+`}`...))
			}
		})
	}
	for _, body := range []string{
		`{"checkpoints":[{},]}`, `{"checkpoints":[,{}]}`, `{"checkpoints":[{}{}]}`, `{"checkpoints":nul}`,
		`{"checkpoints":[],"checkpoints":[]}`, `{"checkpoints":{}}`, `{"Checkpoints":[]}`, `{"checkpoints":[nullx]}`,
	} {
		if checkSameCheckpoint(t, structs.ClaimCheckpointBatchType, []byte(body)) {
			t.Errorf("%s took the fast path", body)
		}
	}
}

// FuzzDecodeCheckpoint: whatever decodeCheckpoint takes, encoding/json
// takes and decodes to the same value, for both checkpoint types.
func FuzzDecodeCheckpoint(f *testing.F) {
	for _, bodies := range checkpointBodies(f) {
		for _, b := range bodies {
			f.Add(b)
		}
	}
	f.Add([]byte("null")) // decoded to a nil request once (TestDecodeCheckpointEdges "null body")
	f.Fuzz(func(t *testing.T, body []byte) {
		checkSameCheckpoint(t, structs.ClaimCheckpointType, body)
		checkSameCheckpoint(t, structs.ClaimCheckpointBatchType, body)
	})
}

// BenchmarkDecodeCheckpoint decodes a release's usual checkpoint entry
// (decodeCommand, fast path) and the same entry's request with
// encoding/json (the path before it), in interleaved rounds of 20,000
// decodes, and reports the median [min-max] of each side's ns per decode
// and of their per-round ratio (docs/benchmarks-history.md, "the floor,
// and checkpoint entries without encoding/json"):
//
//	go test -run '^$' -bench '^BenchmarkDecodeCheckpoint$' -benchtime 1x ./host/cluster/
func BenchmarkDecodeCheckpoint(b *testing.B) {
	body := checkpointBodies(b)[structs.ClaimCheckpointType][1]
	data, err := encodeCommand(structs.ClaimCheckpointType, time.Now(), json.RawMessage(body))
	if err != nil {
		b.Fatal(err)
	}
	const n = 20000
	timed := func(decode func() error) func() float64 {
		return func() float64 {
			start := time.Now()
			for range n {
				if err := decode(); err != nil {
					b.Fatal(err)
				}
			}
			return float64(time.Since(start).Nanoseconds()) / n
		}
	}
	fast := timed(func() error { _, _, _, err := decodeCommand(data); return err })
	slow := timed(func() error {
		var when time.Time
		at, req, _ := splitEnvelope(data[1:])
		if err := when.UnmarshalJSON(at); err != nil {
			return err
		}
		return json.Unmarshal(req, &structs.ClaimCheckpointRequest{})
	})
	for b.Loop() {
		r := testutil.Interleave(7, fast, slow)
		testutil.ReportSpread(b, r[0], "fast-ns/decode")
		testutil.ReportSpread(b, r[1], "encoding-json-ns/decode")
		testutil.ReportSpread(b, testutil.Ratios(r[0], r[1]), "fast/encoding-json")
	}
}

// checkSameEncoding fails when encodeCheckpoint writes req other than
// json.Marshal does; it reports whether encodeCheckpoint wrote it.
func checkSameEncoding(t *testing.T, req any) bool {
	t.Helper()
	got, ok := appendCheckpoint(nil, req)
	want, err := json.Marshal(req)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("encodeCheckpoint wrote %s where json.Marshal fails: %v", got, err)
	}
	if string(got) != string(want) {
		t.Fatalf("encodeCheckpoint wrote\n%s\njson.Marshal\n%s", got, want)
	}
	return true
}

// The checkpoints a release writes are encoded without encoding/json and
// to the same bytes; what plainjson.Writer does not write as json.Marshal
// does is left to it.
func TestEncodeCheckpointMatchesJSON(t *testing.T) {
	now := time.Date(2026, 12, 3, 13, 0, 36, 461637716, time.UTC)
	var decoded []*structs.ClaimCheckpointRequest
	for typ, bodies := range checkpointBodies(t) {
		for _, body := range bodies {
			req, err := newRequest(typ)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(body, req); err != nil {
				t.Fatal(err)
			}
			if !checkSameEncoding(t, req) {
				t.Errorf("type %d: %s is not encoded by encodeCheckpoint", typ, body)
			}
			if r, ok := req.(*structs.ClaimCheckpointRequest); ok {
				decoded = append(decoded, r)
			}
		}
	}
	holds := []*structs.ClaimHold{{Since: now}, {Reason: "r", Since: now, Until: now.Add(time.Hour)}, {Module: "m", Since: now}, {ModuleVersion: "1", Since: now}}
	for _, h := range holds {
		req := &structs.ClaimCheckpointRequest{Claim: &structs.Claim{Hold: h, PublishContext: map[string]string{"z": "1", "a": "2", "m": ""}}}
		if !checkSameEncoding(t, req) {
			t.Errorf("hold %+v is not encoded by encodeCheckpoint", h)
		}
	}
	if !checkSameEncoding(t, (*structs.ClaimCheckpointBatchRequest)(nil)) || !checkSameEncoding(t, (*structs.ClaimCheckpointRequest)(nil)) {
		t.Error("a nil request is not encoded as null by encodeCheckpoint")
	}
	if !checkSameEncoding(t, &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{nil, decoded[0]}}) {
		t.Error("a batch with a nil checkpoint is not encoded by encodeCheckpoint")
	}
	// What json.Marshal escapes is written with the same escapes; what it
	// writes differently by Go version (\b, \f), checks (beyond ASCII) or
	// cannot write is left to it.
	for name, tc := range map[string]struct {
		mangle  func(r *structs.ClaimCheckpointRequest)
		written bool
	}{
		"quote":          {func(r *structs.ClaimCheckpointRequest) { r.VolumeID = `v"1` }, true},
		"backslash":      {func(r *structs.ClaimCheckpointRequest) { r.Claim.AllocID = `a\b` }, true},
		"html":           {func(r *structs.ClaimCheckpointRequest) { r.Claim.LastError.Message = "a <b> & c" }, true},
		"control":        {func(r *structs.ClaimCheckpointRequest) { r.Claim.NodeID = "n\t1\x00" }, true},
		"map key":        {func(r *structs.ClaimCheckpointRequest) { r.Claim.PublishContext = map[string]string{"<": "v"} }, true},
		"map value":      {func(r *structs.ClaimCheckpointRequest) { r.Claim.PublishContext = map[string]string{"k": "&"} }, true},
		"backspace":      {func(r *structs.ClaimCheckpointRequest) { r.Claim.NodeID = "n\b1" }, false},
		"delete":         {func(r *structs.ClaimCheckpointRequest) { r.Claim.StagingPath = "/s\x7f" }, false},
		"non-ASCII":      {func(r *structs.ClaimCheckpointRequest) { r.Claim.TargetPath = "/tä" }, false},
		"line separator": {func(r *structs.ClaimCheckpointRequest) { r.Namespace = "n\u2028" }, false},
		"invalid UTF-8":  {func(r *structs.ClaimCheckpointRequest) { r.Namespace = "n\xff" }, false},
		"map key beyond ASCII": {func(r *structs.ClaimCheckpointRequest) {
			r.Claim.PublishContext = map[string]string{"é": "v"}
		}, false},
		"year 10000": {func(r *structs.ClaimCheckpointRequest) {
			r.Claim.ModifyTime = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		}, false},
	} {
		req := checkpointFromJSON(t, checkpointBodies(t)[structs.ClaimCheckpointType][1])
		tc.mangle(req)
		if got := checkSameEncoding(t, req); got != tc.written {
			t.Errorf("%s: encoded by encodeCheckpoint %v, want %v", name, got, tc.written)
		}
		// And the whole entry is what it was: encodeCommand falls back.
		data, err := encodeCommand(structs.ClaimCheckpointType, now, req)
		want, werr := json.Marshal(req)
		if (err == nil) != (werr == nil) || err == nil && !strings.HasSuffix(string(data), `"req":`+string(want)+`}`) {
			t.Errorf("%s: encodeCommand gave %s, %v; json.Marshal %s, %v", name, data, err, want, werr)
		}
	}
	// The encoding a release pays for: fewer allocations than json.Marshal
	// (counts, not times).
	usual := decoded[1]
	fast := testing.AllocsPerRun(50, func() { _, _ = encodeCommand(structs.ClaimCheckpointType, now, usual) })
	slow := testing.AllocsPerRun(50, func() { _, _ = json.Marshal(usual) }) + 1 // and encodeCommand's copy
	t.Logf("allocs: encodeCommand %.0f, json.Marshal and the entry's copy %.0f", fast, slow)
	if fast >= slow {
		t.Errorf("encodeCommand allocates %.0f objects per checkpoint entry, json.Marshal and the entry's copy %.0f: want fewer", fast, slow)
	}
}

func checkpointFromJSON(t testing.TB, body []byte) *structs.ClaimCheckpointRequest {
	t.Helper()
	r := &structs.ClaimCheckpointRequest{}
	if err := json.Unmarshal(body, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// FuzzEncodeCheckpoint: whatever encodeCheckpoint writes, json.Marshal
// writes the same, for checkpoints built from any strings, numbers and
// times.
func FuzzEncodeCheckpoint(f *testing.F) {
	f.Add("default", "b1-v0001", "/dev/x", "csi", int64(-3), uint64(9), int64(1764766836461637716), 3600, true)
	f.Add("n\"", "<v>", "", "", int64(0), uint64(0), int64(-62135596800000000), 0, false)
	f.Fuzz(func(t *testing.T, ns, id, dev, kind string, attempts int64, index uint64, unixNano int64, zone int, flag bool) {
		at := time.Unix(0, unixNano).In(time.FixedZone("", zone%(24*3600)))
		c := &structs.ClaimCheckpointRequest{Namespace: ns, VolumeID: id, Term: index, Unstaged: flag, Free: !flag,
			Claim: &structs.Claim{AllocID: id, NodeID: ns, State: structs.ClaimState(kind), Attempts: int(attempts),
				PublishContext: map[string]string{dev: id, kind: ns}, ExternalNodeID: dev, CreateTime: at, ModifyIndex: index,
				SkipNodeStep: flag, NodeUnpublished: flag}}
		if flag {
			c.Claim.LastError = &structs.ClaimError{Kind: structs.ErrorKind(kind), Code: uint32(index), Message: dev, Fatal: flag, Time: at}
			c.Claim.Hold = &structs.ClaimHold{Reason: dev, Since: at}
		}
		checkSameEncoding(t, c)
		checkSameEncoding(t, &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{c, c}})
	})
}

// BenchmarkEncodeCheckpoint encodes a release's usual checkpoint with
// appendCheckpoint (into a reused buffer, as encodeCommand does) and with json.Marshal (the path before it), in
// interleaved rounds of 20,000 encodings, and reports the median
// [min-max] of each side's ns per encoding and of their per-round ratio:
//
//	go test -run '^$' -bench '^BenchmarkEncodeCheckpoint$' -benchtime 1x ./host/cluster/
func BenchmarkEncodeCheckpoint(b *testing.B) {
	req := checkpointFromJSON(b, checkpointBodies(b)[structs.ClaimCheckpointType][1])
	const n = 20000
	timed := func(encode func() bool) func() float64 {
		return func() float64 {
			start := time.Now()
			for range n {
				if !encode() {
					b.Fatal("not encoded")
				}
			}
			return float64(time.Since(start).Nanoseconds()) / n
		}
	}
	var scratch []byte
	fast := timed(func() bool {
		var ok bool
		scratch, ok = appendCheckpoint(scratch[:0], req)
		return ok
	})
	slow := timed(func() bool { _, err := json.Marshal(req); return err == nil })
	for b.Loop() {
		r := testutil.Interleave(7, fast, slow)
		testutil.ReportSpread(b, r[0], "fast-ns/encode")
		testutil.ReportSpread(b, r[1], "encoding-json-ns/encode")
		testutil.ReportSpread(b, testutil.Ratios(r[0], r[1]), "fast/encoding-json")
	}
}
