package source

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/volhost/volhost/plugins/source/sourcetest"
)

// FuzzPullSignature: the signature tag is the registry's to serve, and
// nothing vouches for it until a signature verifies; whatever manifest it
// serves there, Pull never panics, its error stays bounded, and a pull
// that succeeds yields exactly the bundle that was signed.
func FuzzPullSignature(f *testing.F) {
	host, _ := sourcetest.NewRegistry(f)
	ref := host + "/modules/policy:v2"
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	man, err := Pin("policy", testWasm, testManifest)
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	d, err := Push(ctx, ref, Bundle{Wasm: testWasm, Manifest: man})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := Sign(ctx, ref, key); err != nil {
		f.Fatal(err)
	}
	sigURL := "http://" + host + "/v2/modules/policy/manifests/" + d.Algorithm + "-" + d.Hex + ".sig"
	resp, err := http.Get(sigURL)
	if err != nil {
		f.Fatal(err)
	}
	signed, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		f.Fatalf("signature manifest: %d %v", resp.StatusCode, err)
	}
	mediaType := resp.Header.Get("Content-Type")
	f.Add(signed)
	f.Add(bytes.Replace(signed, []byte(`"layers":[`), []byte(`"layers":[{},{},`), 1))
	f.Fuzz(func(t *testing.T, sigManifest []byte) {
		req, err := http.NewRequest(http.MethodPut, sigURL, bytes.NewReader(sigManifest))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", mediaType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return // the registry refused it: nothing to serve
		}
		b, err := Pull(ctx, ref, d, &key.PublicKey, 1<<20)
		if err != nil {
			if len(err.Error()) > 64<<10 {
				t.Fatalf("an error of %d bytes", len(err.Error()))
			}
			return
		}
		if !bytes.Equal(b.Wasm, testWasm) || !bytes.Equal(b.Manifest, man) {
			t.Fatalf("pulled a bundle other than the one signed: %q", b.Manifest)
		}
	})
}

// TestPullRefusesHugeSignatureTags: a registry serving a signature tag of
// thousands of layers (none vouched for) gets a short refusal naming the
// bound, not a decode of every layer and an error naming each.
func TestPullRefusesHugeSignatureTags(t *testing.T) {
	host, _ := sourcetest.NewRegistry(t)
	ref := host + "/modules/policy:v2"
	key := newKey(t)
	pushSigned(t, ref, key)
	ctx := context.Background()
	d, err := Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	sigURL := "http://" + host + "/v2/modules/policy/manifests/" + d.Algorithm + "-" + d.Hex + ".sig"
	for _, n := range []int{65, 30000} {
		layers := bytes.Repeat([]byte(`{"mediaType":"x","size":1,"digest":"sha256:`+d.Hex+`"},`), n)
		body := append(append([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"x","size":1,"digest":"sha256:`+d.Hex+`"},"layers":[`), layers[:len(layers)-1]...), "]}"...)
		req, err := http.NewRequest(http.MethodPut, sigURL, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("registry: %d", resp.StatusCode)
		}
		_, err = Pull(ctx, ref, d, &key.PublicKey, 1<<20)
		if !errors.Is(err, ErrBadSignature) || len(err.Error()) > 512 || !strings.Contains(err.Error(), "over") {
			t.Fatalf("%d layers: %.300v (%d bytes)", n, err, len(err.Error()))
		}
	}
}
