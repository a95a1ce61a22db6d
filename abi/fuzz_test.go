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
}

func FuzzConfigureRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &ConfigureRequest{} }, b) })
}

func FuzzConfigureResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &ConfigureResponse{} }, b) })
}

func FuzzPolicyRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, func() Message { return &PolicyRequest{} }, b) })
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
