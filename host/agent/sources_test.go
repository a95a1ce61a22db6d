package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestModuleSourceConfig: a module_source block is read from HCL and
// checked; every bad one is named.
func TestModuleSourceConfig(t *testing.T) {
	dir := t.TempDir()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	pub := filepath.Join(dir, "module.pub")
	os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
	junk := filepath.Join(dir, "junk.pub")
	os.WriteFile(junk, []byte("junk"), 0o644)
	file := filepath.Join(dir, "agent.hcl")
	os.WriteFile(file, []byte(fmt.Sprintf(`
module_dir = %q
module_source "policy" {
  oci           = "127.0.0.1:5000/modules/policy:stable"
  public_key    = %q
  poll_interval = "30s"
  shadow        = true
}
`, dir, pub)), 0o644)
	fc, err := LoadConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Dev = true
	cfg.Merge(fc)
	d, err := cfg.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.moduleSources) != 1 || d.moduleSources[0].interval != 30*time.Second || !d.moduleSources[0].cfg.Shadow || !d.moduleSources[0].key.Equal(&k.PublicKey) {
		t.Fatalf("module sources %+v", d.moduleSources)
	}

	for _, tc := range []struct {
		dir  string
		src  ModuleSourceConfig
		want string
	}{
		{"", ModuleSourceConfig{Name: "p", OCI: "r/p:1", PublicKey: pub}, "needs module_dir"},
		{dir, ModuleSourceConfig{Name: "../p", OCI: "r/p:1", PublicKey: pub}, "no path"},
		{dir, ModuleSourceConfig{Name: "policy\u3164", OCI: "r/p:1", PublicKey: pub}, "U+3164 at byte 6 is not allowed"},
		{dir, ModuleSourceConfig{Name: "p", OCI: "UPPER CASE:?", PublicKey: pub}, "oci ="},
		{dir, ModuleSourceConfig{Name: "p", OCI: "r/p:1", PublicKey: filepath.Join(dir, "none.pub")}, "none.pub"},
		{dir, ModuleSourceConfig{Name: "p", OCI: "r/p:1", PublicKey: junk}, "no PEM block"},
		{dir, ModuleSourceConfig{Name: "p", OCI: "r/p:1", PublicKey: pub, PollInterval: "-1s"}, "poll_interval"},
	} {
		cfg := DefaultConfig()
		cfg.Dev = true
		cfg.ModuleDir = tc.dir
		cfg.ModuleSources = []ModuleSourceConfig{tc.src}
		if _, err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "module_source") {
			t.Errorf("%+v: %v, want an error naming module_source and %q", tc.src, err, tc.want)
		}
	}
	cfg = DefaultConfig()
	cfg.Dev = true
	cfg.ModuleDir = dir
	cfg.ModuleSources = []ModuleSourceConfig{{Name: "p", OCI: "r/p:1", PublicKey: pub}, {Name: "p", OCI: "r/q:1", PublicKey: pub}}
	if _, err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Errorf("two blocks for one module: %v", err)
	}
}
