package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// FuzzSpecFiles: a volume, node, plugin or alloc spec file of any bytes,
// HCL or JSON, loads or is refused with one error naming the file, never
// a panic; what loads has the enums the CLI promises to have checked.
func FuzzSpecFiles(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*")
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, strings.HasSuffix(p, ".json"))
	}
	f.Fuzz(func(t *testing.T, src []byte, json bool) {
		name := "spec.hcl"
		if json {
			name = "spec.json"
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, src, 0o600); err != nil {
			t.Fatal(err)
		}
		named := func(kind string, err error) {
			if err != nil && !strings.Contains(err.Error(), name) {
				t.Fatalf("%s: the error does not name the file: %v", kind, err)
			}
		}
		vols, err := loadVolumes(path)
		named("volumes", err)
		for _, v := range vols {
			if !v.AccessMode.Valid() || !v.AttachmentMode.Valid() || v.Namespace == "" {
				t.Fatalf("loaded volume %+v", v)
			}
		}
		nodes, err := loadNodes(path)
		named("nodes", err)
		for _, n := range nodes {
			if !n.Status.Valid() {
				t.Fatalf("loaded node %+v", n)
			}
		}
		_, err = loadPlugins(path)
		named("plugins", err)
		allocs, err := loadAllocs(path)
		named("allocs", err)
		for _, a := range allocs {
			if !structs.AllocClientStatus(a.ClientStatus).Valid() || a.Namespace == "" {
				t.Fatalf("loaded alloc %+v", a)
			}
		}
	})
}
