package source

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/volhost/volhost/plugins/source/sourcetest"
)

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var (
	testWasm     = []byte("\x00asm\x01\x00\x00\x00 not a real module, the registry does not care")
	testManifest = []byte("kind = \"release-policy\"\nversion = \"2.0.0\"\n")
)

func pushSigned(t *testing.T, ref string, key *ecdsa.PrivateKey) Bundle {
	t.Helper()
	man, err := Pin("policy", testWasm, testManifest)
	if err != nil {
		t.Fatal(err)
	}
	b := Bundle{Wasm: testWasm, Manifest: man}
	d, err := Push(context.Background(), ref, b)
	if err != nil {
		t.Fatal(err)
	}
	if key != nil {
		signed, err := Sign(context.Background(), ref, key)
		if err != nil {
			t.Fatal(err)
		}
		if signed != d {
			t.Fatalf("signed %s, pushed %s", signed, d)
		}
	}
	return b
}

func TestPushSignPull(t *testing.T) {
	host, tamper := sourcetest.NewRegistry(t)
	ref := host + "/modules/policy:v2"
	key := newKey(t)
	want := pushSigned(t, ref, key)
	ctx := context.Background()
	d, err := Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Pull(ctx, ref, d, &key.PublicKey, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Wasm, want.Wasm) || !bytes.Equal(got.Manifest, want.Manifest) {
		t.Fatalf("pulled %q / %q", got.Wasm, got.Manifest)
	}

	// Another key: refused.
	if _, err := Pull(ctx, ref, d, &newKey(t).PublicKey, 1<<20); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("pull verified with the wrong key: %v", err)
	}
	// A layer changed in transit: refused by its digest.
	tamper.On.Store(true)
	if _, err := Pull(ctx, ref, d, &key.PublicKey, 1<<20); err == nil {
		t.Fatal("a tampered layer was accepted")
	}
	tamper.On.Store(false)
	// A new push to the tag, unsigned: refused as unsigned.
	other := host + "/modules/policy:v3"
	w3 := append([]byte("\x00asm\x01\x00\x00\x00"), "v3"...)
	m3, _ := Pin("policy", w3, testManifest)
	d3, err := Push(ctx, other, Bundle{Wasm: w3, Manifest: m3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(ctx, other, d3, &key.PublicKey, 1<<20); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("an unsigned bundle: %v", err)
	}
	// Over the size bound.
	if _, err := Pull(ctx, ref, d, &key.PublicKey, 4); !errors.Is(err, ErrBadBundle) {
		t.Fatalf("an oversized wasm layer: %v", err)
	}
}

// TestPullRefusesUnpinned: a bundle whose manifest does not pin its wasm
// is refused (pushed by hand, not by Push's callers).
func TestPullRefusesUnpinned(t *testing.T) {
	host, _ := sourcetest.NewRegistry(t)
	ref := host + "/modules/raw:1"
	key := newKey(t)
	if _, err := Push(context.Background(), ref, Bundle{Wasm: testWasm, Manifest: testManifest}); err != nil {
		t.Fatal(err)
	}
	d, err := Sign(context.Background(), ref, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(context.Background(), ref, d, &key.PublicKey, 1<<20); !errors.Is(err, ErrBadBundle) || !strings.Contains(err.Error(), "pins sha256") {
		t.Fatalf("unpinned bundle: %v", err)
	}
}

func TestPin(t *testing.T) {
	man, err := Pin("p", testWasm, testManifest)
	if err != nil || !bytes.Contains(man, []byte("sha256 = ")) {
		t.Fatalf("Pin: %q %v", man, err)
	}
	if again, err := Pin("p", testWasm, man); err != nil || !bytes.Equal(again, man) {
		t.Fatalf("Pin of a pinned manifest: %q %v", again, err)
	}
	if _, err := Pin("p", []byte("other"), man); err == nil || !strings.Contains(err.Error(), "pins sha256") {
		t.Fatalf("Pin of other code: %v", err)
	}
	filled, err := Pin("p", testWasm, []byte("kind = \"release-policy\"\nsha256 = \"\"\n"))
	if err != nil || bytes.Count(filled, []byte("sha256")) != 1 || !bytes.Contains(filled, man[bytes.Index(man, []byte("sha256")):]) {
		t.Fatalf("Pin over an empty sha256 attribute: %q %v", filled, err)
	}
}

func TestKeys(t *testing.T) {
	k := newKey(t)
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	priv, err := ParsePrivateKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil || !priv.Equal(k) {
		t.Fatalf("ParsePrivateKey: %v", err)
	}
	pder, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	pub, err := ParsePublicKey(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}))
	if err != nil || !pub.Equal(&k.PublicKey) {
		t.Fatalf("ParsePublicKey: %v", err)
	}
	if _, err := ParsePrivateKey(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED COSIGN PRIVATE KEY", Bytes: []byte("x")})); err == nil || !strings.Contains(err.Error(), "encrypted") {
		t.Fatalf("encrypted key: %v", err)
	}
	if _, err := ParsePublicKey([]byte("junk")); err == nil {
		t.Fatal("junk public key accepted")
	}
}

// TestPollerSignAfterPush: a poll between push and sign does not refuse
// the digest for good; a bad signature does, until the tag moves.
func TestPollerSignAfterPush(t *testing.T) {
	host, _ := sourcetest.NewRegistry(t)
	ref := host + "/modules/policy:stable"
	key := newKey(t)
	var applied, refusals int
	p := &Poller{Module: "policy", Ref: ref, Key: &key.PublicKey, MaxWasm: 1 << 20,
		Apply:   func(context.Context, Bundle, v1.Hash) error { applied++; return nil },
		Refused: func(v1.Hash, error) { refusals++ }}
	pushSigned(t, ref, nil)
	ctx := context.Background()
	for range 2 {
		if ok, err := p.Poll(ctx); ok || !errors.Is(err, ErrUnsigned) {
			t.Fatalf("poll before the signature: %v %v", ok, err)
		}
	}
	if refusals != 1 {
		t.Fatalf("%d refusals reported for one unsigned digest, want 1", refusals)
	}
	if _, err := Sign(ctx, ref, key); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Poll(ctx); !ok || err != nil || applied != 1 {
		t.Fatalf("poll after the signature: %v %v (applied %d)", ok, err, applied)
	}
	if ok, err := p.Poll(ctx); ok || err != nil || applied != 1 {
		t.Fatalf("poll of an applied digest: %v %v", ok, err)
	}
}
