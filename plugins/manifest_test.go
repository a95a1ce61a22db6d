package plugins

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
)

func TestParseManifestFiles(t *testing.T) {
	tests := []struct {
		file    string
		want    *Manifest
		wantErr []string // substrings the error must contain
	}{
		{
			file: "full.hcl",
			want: &Manifest{
				Kind: abi.KindReleasePolicy, Version: "1.2.3",
				PluginIDs: []string{"gcepd", "ebs-*"}, Volumes: []string{"default/web-*", "prod/db"},
				Limits: Limits{MemoryPages: 128, CallTimeout: 250 * time.Millisecond, PoolSize: 2, MaxCalls: 500, TableElements: 4096},
				Config: map[string]string{"grace": "30s"},
				SHA256: "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789",
			},
		},
		{
			file: "minimal.hcl",
			want: &Manifest{Kind: abi.KindCSIAdapter, Limits: Limits{MemoryPages: DefaultMemoryPages,
				CallTimeout: DefaultCallTimeout, PoolSize: DefaultPoolSize, MaxCalls: DefaultMaxCalls, TableElements: DefaultTableElements}},
		},
		{file: "unknown-attr.hcl", wantErr: []string{"unknown-attr.hcl", "colour"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "manifests", tt.file)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseManifest(path, src)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("ParseManifest: no error, want one mentioning %q", tt.wantErr)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseManifest: %v", err)
			}
			if got.Kind != tt.want.Kind || got.Version != tt.want.Version || got.Limits != tt.want.Limits ||
				got.SHA256 != tt.want.SHA256 || got.Default != tt.want.Default ||
				strings.Join(got.PluginIDs, ",") != strings.Join(tt.want.PluginIDs, ",") ||
				strings.Join(got.Volumes, ",") != strings.Join(tt.want.Volumes, ",") ||
				len(got.Config) != len(tt.want.Config) || got.Config["grace"] != tt.want.Config["grace"] {
				t.Errorf("ParseManifest = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseManifestInvalid(t *testing.T) {
	tests := []struct {
		name, src, wantErr string
	}{
		{"missing kind", `version = "1"`, "kind"},
		{"bad kind", `kind = "scheduler"`, `kind = "scheduler"`},
		{"bad timeout", "kind = \"release-policy\"\nlimits {\n call_timeout = \"soon\"\n}", "limits.call_timeout"},
		{"zero timeout", "kind = \"release-policy\"\nlimits {\n call_timeout = \"0s\"\n}", "must be positive"},
		{"pages too big", "kind = \"release-policy\"\nlimits {\n memory_pages = 70000\n}", "limits.memory_pages"},
		{"pool zero", "kind = \"release-policy\"\nlimits {\n pool_size = 0\n}", "limits.pool_size"},
		{"max calls zero", "kind = \"release-policy\"\nlimits {\n max_calls = 0\n}", "limits.max_calls"},
		{"table zero", "kind = \"release-policy\"\nlimits {\n table_elements = 0\n}", "limits.table_elements = 0: must be between 1 and 4294967295"},
		{"table too big", "kind = \"release-policy\"\nlimits {\n table_elements = 4294967296\n}", "limits.table_elements = 4294967296"},
		{"unknown limit", "kind = \"release-policy\"\nlimits {\n cpu = 1\n}", "cpu"},
		{"bad selector", "kind = \"release-policy\"\nvolumes = [\"web\"]", `selector "web"`},
		{"bad glob", "kind = \"release-policy\"\nplugin_ids = [\"[\"]", "plugin_ids"},
		{"bad sha", "kind = \"release-policy\"\nsha256 = \"xyz\"", "sha256"},
		{"syntax", "kind = ", "bad.hcl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseManifest("bad.hcl", []byte(tt.src))
			if err == nil {
				t.Fatalf("no error, want one mentioning %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "bad.hcl") {
				t.Errorf("error %q should mention %q and the file", err, tt.wantErr)
			}
		})
	}
}

func TestManifestMatch(t *testing.T) {
	m := &Manifest{PluginIDs: []string{"gce*"}, Volumes: []string{"default/web-*", "*/shared"}}
	tests := []struct {
		ns, id, plugin string
		vol, plug      bool
	}{
		{"default", "web-1", "x", true, false},
		{"prod", "web-1", "gcepd", false, true},
		{"prod", "shared", "", true, false},
		{"default", "db", "ebs", false, false},
	}
	for _, tt := range tests {
		if got := m.matchVolume(tt.ns, tt.id); got != tt.vol {
			t.Errorf("matchVolume(%s/%s) = %v, want %v", tt.ns, tt.id, got, tt.vol)
		}
		if got := m.matchPlugin(tt.plugin); got != tt.plug {
			t.Errorf("matchPlugin(%s) = %v, want %v", tt.plugin, got, tt.plug)
		}
	}
}
