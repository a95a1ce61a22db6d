package plugins

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/volhost/volhost/plugins/pluginstest"
)

// TestEveryExampleModuleLoads loads every module under examples/plugins
// with its shipped manifest into one manager, the way `make run` loads
// their build directory, and requires each to serve: a deliberately faulty
// module there made a new operator's first start log "module refused"
// Faulty modules belong in plugins/pluginstest/modules.
func TestEveryExampleModuleLoads(t *testing.T) {
	root := filepath.Join(pluginstest.RepoRoot(), "examples", "plugins")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	e := newEnv(t, func(dir string) {
		for _, ent := range entries {
			name := ent.Name()
			if !ent.IsDir() || name == "build" {
				continue
			}
			hcl, err := os.ReadFile(filepath.Join(root, name, name+".hcl"))
			if err != nil {
				t.Fatalf("example %s ships no manifest %s.hcl: %v", name, name, err)
			}
			names = append(names, name)
			writeModule(t, dir, name, exampleWasm(t, name), hcl)
		}
	}, nil)
	if len(names) == 0 {
		t.Fatal("no example modules found")
	}
	for _, name := range names {
		st, ok := e.m.StatusOf(name)
		if !ok {
			t.Errorf("example %s: no status", name)
			continue
		}
		if st.State != StateServing {
			t.Errorf("example %s is %s (%s), want serving: examples/plugins must hold only working modules", name, st.State, st.Refusal)
		}
	}
}
