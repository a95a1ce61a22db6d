package abi

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// The seed corpus lives in testdata/fuzz/FuzzX/ (plain `go test` runs every
// file there). Regenerate it from samples_test.go with
//
//	go test ./abi -run TestWriteFuzzSeeds -write-fuzz-seeds
var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false, "rewrite testdata/fuzz seed corpus from the sample messages")

// fuzzRoundTrip decodes arbitrary bytes as a message. Decoding must never
// panic (the host decodes guest output); whatever decodes must re-encode to
// bytes that decode to the same message and re-encode identically.
func fuzzRoundTrip(t *testing.T, newMsg func() Message, in []byte) {
	m1 := newMsg()
	if err := m1.Unmarshal(in); err != nil {
		return
	}
	b1 := m1.MarshalAppend(nil)
	m2 := newMsg()
	if err := m2.Unmarshal(b1); err != nil {
		t.Fatalf("re-encoded message does not decode: %v\n%x", err, b1)
	}
	if !reflect.DeepEqual(m1, m2) {
		t.Fatalf("round trip differs:\n%+v\n%+v", m1, m2)
	}
	if b2 := m2.MarshalAppend(nil); !bytes.Equal(b1, b2) {
		t.Fatalf("encoding not stable:\n%x\n%x", b1, b2)
	}
	// The decoders' fast path (fields in order) and their general loop must
	// agree: an unknown field at the front of every message body sends the
	// whole decode through the loop.
	name := reflect.TypeOf(m1).Elem().Name()
	for _, in := range [][]byte{append([]byte{unknownField, 0}, in...), withUnknownFields(name, b1)} {
		m3 := newMsg()
		if err := m3.Unmarshal(in); err != nil {
			t.Fatalf("with unknown fields: %v\n%x", err, in)
		}
		if !reflect.DeepEqual(m1, m3) {
			t.Fatalf("fast path and loop differ:\n%+v\n%+v", m1, m3)
		}
	}
}

// unknownField is the tag of field 14, varint: no message has a field 14.
const unknownField = 14 << 3

// nestedFields names each message's message-typed fields ("entry": a map
// field, whose entries are messages) for withUnknownFields.
var nestedFields = map[string]map[protowire.Number]string{
	"ConfigureRequest": {2: "entry"},
	"VolumeView":       {7: "entry"},
	"NodeView":         {4: "entry"},
	"PolicyRequest":    {2: "VolumeView", 3: "ClaimView", 4: "AllocView", 5: "NodeView"},
	"PolicyResponse":   {1: "Decision"},
	"AdapterRequest":   {2: "ClaimView", 3: "VolumeView", 4: "NodeView", 5: "PluginView"},
	"AdapterResponse":  {4: "entry"},
	"FenceRequest":     {2: "NodeView", 3: "PluginView", 6: "VolumeView", 7: "ClaimView"},
}

// withUnknownFields returns b, a valid encoding of message name, with an
// unknown varint field 14 = 0 at the front of its body and of every nested
// message's and map entry's body.
func withUnknownFields(name string, b []byte) []byte {
	out := []byte{unknownField, 0}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if n < 0 || m < 0 {
			panic("withUnknownFields: invalid encoding")
		}
		if sub, ok := nestedFields[name][num]; ok && typ == protowire.BytesType {
			body, _ := protowire.ConsumeBytes(b[n:])
			out = protowire.AppendTag(out, num, typ)
			out = protowire.AppendBytes(out, withUnknownFields(sub, body))
		} else {
			out = append(out, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return out
}

func FuzzConfigureRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &ConfigureRequest{} }, b) })
}

func FuzzConfigureResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &ConfigureResponse{} }, b) })
}

func FuzzPolicyRequest(f *testing.F) {
	// The guest SDK decodes every call into one reused value: after a
	// full sample, any input must decode (or fail) as a fresh Unmarshal.
	reused := samplePolicyRequest()
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzRoundTrip(t, func() Message { return &PolicyRequest{} }, b)
		var fresh PolicyRequest
		ferr := fresh.Unmarshal(b)
		rerr := reused.UnmarshalReusing(b)
		if (ferr == nil) != (rerr == nil) {
			t.Fatalf("Unmarshal: %v, UnmarshalReusing: %v", ferr, rerr)
		}
		if ferr == nil && !reflect.DeepEqual(normalizeEmpty(fresh), normalizeEmpty(*reused)) {
			t.Fatalf("reused decode %+v, fresh %+v", *reused, fresh)
		}
		if err := reused.UnmarshalReusing(samplePolicyRequest().MarshalAppend(nil)); err != nil {
			t.Fatal(err)
		}
		// The borrowing decode (guest.HandleReleaseInto) over the same
		// reused value: the same answer without the string copy.
		berr := reused.UnmarshalBorrowing(b)
		if (ferr == nil) != (berr == nil) {
			t.Fatalf("Unmarshal: %v, UnmarshalBorrowing: %v", ferr, berr)
		}
		if ferr == nil && !reflect.DeepEqual(normalizeEmpty(fresh), normalizeEmpty(*reused)) {
			t.Fatalf("borrowing decode %+v, fresh %+v", *reused, fresh)
		}
		if err := reused.UnmarshalBorrowing(samplePolicyRequest().MarshalAppend(nil)); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzPolicyResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &PolicyResponse{} }, b) })
}

func FuzzAdapterRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &AdapterRequest{} }, b) })
}

func FuzzAdapterResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &AdapterResponse{} }, b) })
}

func FuzzClassifyRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &ClassifyRequest{} }, b) })
}

func FuzzClassifyResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &ClassifyResponse{} }, b) })
}

func FuzzFenceRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &FenceRequest{} }, b) })
}

func FuzzFenceResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &FenceResponse{} }, b) })
}

// seedInputs are the corpus entries per message: the populated sample, its
// encoding cut short, the empty message, and bytes of another message type.
func seedInputs(name string, m Message) map[string][]byte {
	full := m.MarshalAppend(nil)
	other := samplePolicyResponse().MarshalAppend(nil)
	if name == "PolicyResponse" {
		other = samplePolicyRequest().MarshalAppend(nil)
	}
	return map[string][]byte{
		"sample":    full,
		"truncated": full[:len(full)/2],
		"empty":     {},
		"other":     other,
		"garbage":   {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	}
}

func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeFuzzSeeds {
		t.Skip("pass -write-fuzz-seeds to rewrite testdata/fuzz")
	}
	for name, m := range samples() {
		dir := filepath.Join("testdata", "fuzz", "Fuzz"+name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for seed, b := range seedInputs(name, m) {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(b)))
			if err := os.WriteFile(filepath.Join(dir, seed), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFuzzSeedsPresent fails when a fuzz target has no committed corpus, so
// `go test` keeps exercising every decoder on real encodings.
func TestFuzzSeedsPresent(t *testing.T) {
	for name := range samples() {
		entries, err := os.ReadDir(filepath.Join("testdata", "fuzz", "Fuzz"+name))
		if err != nil || len(entries) == 0 {
			t.Errorf("no seed corpus for Fuzz%s (run with -write-fuzz-seeds): %v", name, err)
		}
	}
}
