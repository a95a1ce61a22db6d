package source

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"testing"

	"github.com/volhost/volhost/plugins"
)

// FuzzPin: Pin rewrites a manifest's text, so whatever the manifest, what
// it returns parses, pins the wasm it was given and says everything else
// exactly as the original did (the rewrite touched the pin, nothing else).
// Anything else is an error.
func FuzzPin(f *testing.F) {
	f.Add([]byte("kind = \"release-policy\"\nversion = \"2.0.0\"\n"))
	f.Add([]byte("kind = \"release-policy\"\nsha256 = \"\"\n"))
	f.Add([]byte("kind = \"csi-adapter\"\nconfig = {\n  a = <<EOT\nsha256 = \"\"\nEOT\n}\n"))
	f.Add([]byte("kind = \"csi-adapter\" # no newline at the end"))
	f.Fuzz(func(t *testing.T, manifest []byte) {
		orig, err := plugins.ParseManifest("p.hcl", manifest)
		out, perr := Pin("p", testWasm, manifest)
		if perr != nil {
			return
		}
		if err != nil {
			t.Fatalf("Pin accepted a manifest that does not parse: %v", err)
		}
		got, err := plugins.ParseManifest("p.hcl", out)
		if err != nil {
			t.Fatalf("the pinned manifest does not parse: %v\n%q", err, out)
		}
		sum := sha256.Sum256(testWasm)
		if got.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("the pinned manifest pins %q:\n%q", got.SHA256, out)
		}
		got.SHA256, orig.SHA256 = "", ""
		if !reflect.DeepEqual(got, orig) {
			t.Fatalf("pinning changed the manifest:\n got %+v\nwant %+v", got, orig)
		}
	})
}

// TestPinLeavesConfigAlone: a `sha256 = ""` line inside a config heredoc
// is config, not the pin; Pin pins the module and leaves the config as it
// was (the regular expression Pin used rewrote the heredoc and returned an
// unpinned manifest: FuzzPin's find).
func TestPinLeavesConfigAlone(t *testing.T) {
	man := []byte("kind = \"csi-adapter\"\nconfig = {\n  a = <<EOT\nsha256 = \"\"\nEOT\n}\nsha256 = \"\"\n")
	out, err := Pin("p", testWasm, man)
	if err != nil {
		t.Fatal(err)
	}
	got, err := plugins.ParseManifest("p.hcl", out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config["a"] != "sha256 = \"\"\n" || got.SHA256 == "" {
		t.Fatalf("config %q, pin %q:\n%s", got.Config["a"], got.SHA256, out)
	}
}
