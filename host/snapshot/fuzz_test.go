package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fuzzKey is fixed so the seed corpus under testdata/fuzz/FuzzRead (run by
// every `go test`, hence `make test`) stays readable.
var fuzzKey = testKeyring{"k1": bytes.Repeat([]byte{7}, 32)}

// FuzzRead: whatever the bytes, Read returns an error or a store, never
// panics, and a store it returns saves and reads back to the same state.
func FuzzRead(f *testing.F) {
	good := save(f, testStore(f), fuzzKey, "c1")
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"volhost_snapshot":2,"cluster_id":"c1"}` + "\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, st, err := Read(bytes.NewReader(in), fuzzKey, Options{ClusterID: "c1", ForceForeign: true})
		if err != nil {
			if st != nil {
				t.Fatal("a store came back with an error")
			}
			return
		}
		again := save(t, st, fuzzKey, "c1")
		_, st2, err := Read(bytes.NewReader(again), fuzzKey, Options{ClusterID: "c1"})
		if err != nil {
			t.Fatalf("re-reading an accepted snapshot: %v", err)
		}
		if digest(t, st) != digest(t, st2) {
			t.Fatal("accepted snapshot does not round-trip")
		}
	})
}
