package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
)

// benign returns a small valid release-policy module; variants differ in
// their bytes (the buffer address), so each is its own generation.
func benign(variant int) []byte {
	h := newHmod()
	h.decide = cat(i32c(int64(variant)), []byte{0x1a}) // i32.const variant; drop
	return h.build()
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func reload(t *testing.T, m *Manager) {
	t.Helper()
	if _, err := m.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func status(t *testing.T, m *Manager, name string) Status {
	t.Helper()
	st, ok := m.StatusOf(name)
	if !ok {
		t.Fatalf("no module %s", name)
	}
	return st
}

// TestModuleDirHazards: a FIFO does not block a reload (the modules after
// it still load), symlinks are refused and a dangling one is named as
// such, and a file over max_module_size is refused before it is read.
func TestModuleDirHazards(t *testing.T) {
	outside := t.TempDir()
	e := newEnv(t, func(dir string) {
		if err := syscall.Mkfifo(filepath.Join(dir, "a-fifo.wasm"), 0o644); err != nil {
			t.Fatal(err)
		}
		writeModule(t, dir, "a-fifo", nil, manifest("release-policy", ""))
		writeModule(t, outside, "target", benign(1), nil)
		if err := os.Symlink(filepath.Join(outside, "target.wasm"), filepath.Join(dir, "b-link.wasm")); err != nil {
			t.Fatal(err)
		}
		writeModule(t, dir, "b-link", nil, manifest("release-policy", ""))
		if err := os.Symlink(filepath.Join(outside, "gone.wasm"), filepath.Join(dir, "c-dangling.wasm")); err != nil {
			t.Fatal(err)
		}
		writeModule(t, dir, "c-dangling", nil, manifest("release-policy", ""))
		writeModule(t, dir, "d-big", make([]byte, 4097), manifest("release-policy", ""))
		writeModule(t, dir, "z-good", benign(1), manifest("release-policy", ""))
	}, func(o *Options) { o.Maxima.ModuleSize = 4096 })
	for name, want := range map[string]string{
		"a-fifo":     "a-fifo.wasm is not a regular file (a named pipe): refused",
		"b-link":     `b-link.wasm is a symbolic link (to "` + filepath.Join(outside, "target.wasm") + `"): symbolic links are refused`,
		"c-dangling": `c-dangling.wasm is a dangling symbolic link (to "` + filepath.Join(outside, "gone.wasm") + `", which does not exist)`,
		"d-big":      "d-big.wasm is 4097 bytes, over module_limits.max_module_size (4096 bytes)",
	} {
		if st := status(t, e.m, name); st.State != StateRefused || !strings.HasPrefix(st.Refusal, want) {
			t.Errorf("%s: %s %q, want refused %q", name, st.State, st.Refusal, want)
		}
	}
	if st := status(t, e.m, "z-good"); st.State != StateServing {
		t.Fatalf("z-good after the hazards: %s %q", st.State, st.Refusal)
	}
}

// TestTwoDefaultsRefused: a second default module of a kind is refused,
// naming the first; once the first stops being the default, the second
// loads on the next reload.
func TestTwoDefaultsRefused(t *testing.T) {
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "a", benign(1), manifest("release-policy", "default = true"))
		writeModule(t, dir, "b", benign(2), manifest("release-policy", "default = true"))
	}, nil)
	want := "default = true, but release-policy module a is the default already"
	if st := status(t, e.m, "b"); st.State != StateRefused || !strings.HasPrefix(st.Refusal, want) {
		t.Fatalf("b: %s %q, want refused %q", st.State, st.Refusal, want)
	}
	writeModule(t, e.dir, "a", nil, manifest("release-policy", "default = false"))
	reload(t, e.m)
	if st := status(t, e.m, "b"); st.State != StateServing || st.Refusal != "" {
		t.Fatalf("b after a dropped default: %s %q", st.State, st.Refusal)
	}
}

// TestRefusalClearedWhenServingFilesReturn (status tells the truth): a refused
// candidate replaced by the serving files again leaves no refusal behind.
func TestRefusalClearedWhenServingFilesReturn(t *testing.T) {
	good := benign(1)
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "p", good, manifest("release-policy", ""))
	}, nil)
	writeModule(t, e.dir, "p", []byte("not wasm"), nil)
	reload(t, e.m)
	if st := status(t, e.m, "p"); st.State != StateServing || st.Refusal == "" {
		t.Fatalf("after the bad file: %s %q, want serving with a refusal", st.State, st.Refusal)
	}
	writeModule(t, e.dir, "p", good, nil)
	reload(t, e.m)
	if st := status(t, e.m, "p"); st.State != StateServing || st.Refusal != "" || st.Generation != 1 {
		t.Fatalf("after the good file returned: %+v, want generation 1 serving without a refusal", st)
	}
	// A refused first load replaced by a good file: serving, no refusal.
	writeModule(t, e.dir, "q", []byte("not wasm"), manifest("release-policy", ""))
	reload(t, e.m)
	writeModule(t, e.dir, "q", good, nil)
	reload(t, e.m)
	if st := status(t, e.m, "q"); st.State != StateServing || st.Refusal != "" {
		t.Fatalf("q: %s %q", st.State, st.Refusal)
	}
}

// TestHostMaxima: a manifest over a host maximum is refused naming both the
// manifest's attribute and the agent's setting; require_sha256 refuses an
// unpinned manifest.
func TestHostMaxima(t *testing.T) {
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "slow", benign(1), manifest("release-policy", `limits { call_timeout = "87600h" }`))
		writeModule(t, dir, "fat", benign(1), manifest("release-policy", `limits { memory_pages = 4096 }`))
		writeModule(t, dir, "wide", benign(1), manifest("release-policy", `limits { table_elements = 2000000 }`))
		writeModule(t, dir, "ok", benign(1), manifest("release-policy", `limits { call_timeout = "10s" }`))
	}, func(o *Options) { o.Maxima.MemoryPages = 2048 })
	for name, want := range map[string]string{
		"slow": `manifest slow.hcl: limits.call_timeout = "87600h0m0s" is over the agent's module_limits.max_call_timeout = "10s"`,
		"fat":  `manifest fat.hcl: limits.memory_pages = 4096 is over the agent's module_limits.max_memory_pages = 2048`,
		"wide": `manifest wide.hcl: limits.table_elements = 2000000 is over the agent's module_limits.max_table_elements = 1048576`,
	} {
		if st := status(t, e.m, name); st.State != StateRefused || st.Refusal != want {
			t.Errorf("%s: %s %q, want refused %q", name, st.State, st.Refusal, want)
		}
	}
	if st := status(t, e.m, "ok"); st.State != StateServing {
		t.Fatalf("ok: %s %q", st.State, st.Refusal)
	}

	pinned := newEnv(t, func(dir string) {
		writeModule(t, dir, "unpinned", benign(1), manifest("release-policy", ""))
		writeModule(t, dir, "pinned", benign(1), manifest("release-policy", fmt.Sprintf("sha256 = %q", sha(benign(1)))))
	}, func(o *Options) { o.Maxima.RequireSHA256 = true })
	if st := status(t, pinned.m, "unpinned"); st.State != StateRefused || !strings.Contains(st.Refusal, "module_limits.require_sha256") {
		t.Errorf("unpinned: %s %q", st.State, st.Refusal)
	}
	if st := status(t, pinned.m, "pinned"); st.State != StateServing {
		t.Errorf("pinned: %s %q", st.State, st.Refusal)
	}
}

// TestPinnedBundleSwapsAsOne (an atomic bundle): with a sha256 pin, the
// code and the manifest change together whatever order they arrive in: no
// generation is formed from the new wasm and the old manifest, nor the
// reverse, and the old generation serves until both are in place.
func TestPinnedBundleSwapsAsOne(t *testing.T) {
	v1, v2 := benign(1), benign(2)
	man := func(version string, wasm []byte) []byte {
		return []byte(fmt.Sprintf("kind = \"release-policy\"\nversion = %q\nsha256 = %q\n", version, sha(wasm)))
	}
	for _, wasmFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("wasm first: ", wasmFirst), func(t *testing.T) {
			e := newEnv(t, func(dir string) { writeModule(t, dir, "p", v1, man("1", v1)) }, nil)
			if wasmFirst {
				writeModule(t, e.dir, "p", v2, nil)
			} else {
				writeModule(t, e.dir, "p", nil, man("2", v2))
			}
			reload(t, e.m)
			st := status(t, e.m, "p")
			if st.Generation != 1 || st.Version != "1" || st.SHA256 != sha(v1) || !strings.Contains(st.Refusal, "manifest pins") {
				t.Fatalf("half-way: %+v, want generation 1 serving and the mismatch shown", st)
			}
			writeModule(t, e.dir, "p", v2, man("2", v2))
			reload(t, e.m)
			st = status(t, e.m, "p")
			if st.Generation != 2 || st.Version != "2" || st.SHA256 != sha(v2) || st.Refusal != "" {
				t.Fatalf("complete: %+v, want generation 2, version 2, no refusal", st)
			}
			if n := len(e.eventsOf(EventSwapped)); n != 1 {
				t.Fatalf("%d swaps, want 1", n)
			}
		})
	}
}

// TestOnSwap: the hook hears of every change of a module's serving
// generation, and its Selects covers the volumes of the old and the new
// manifest.
func TestOnSwap(t *testing.T) {
	var mu sync.Mutex
	var swaps []Swap
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "p", benign(1), manifest("release-policy", `volumes = ["ns/old-*"]`))
	}, func(o *Options) {
		o.OnSwap = func(s Swap) { mu.Lock(); swaps = append(swaps, s); mu.Unlock() }
	})
	writeModule(t, e.dir, "p", benign(2), manifest("release-policy", `volumes = ["ns/new-*"]`))
	reload(t, e.m)
	if err := os.Remove(filepath.Join(e.dir, "p.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.dir, "p.hcl")); err != nil {
		t.Fatal(err)
	}
	reload(t, e.m)
	mu.Lock()
	defer mu.Unlock()
	if len(swaps) != 3 {
		t.Fatalf("%d swaps, want load, swap, retire: %+v", len(swaps), swaps)
	}
	for i, want := range []uint64{1, 2, 0} {
		if s := swaps[i]; s.Module != "p" || s.Kind != abi.KindReleasePolicy || s.Generation != want {
			t.Fatalf("swap %d: %+v, want generation %d", i, s, want)
		}
	}
	sw := swaps[1]
	for vol, want := range map[string]bool{"old-1": true, "new-1": true, "other": false} {
		if got := sw.Selects(Target{Namespace: "ns", VolumeID: vol}); got != want {
			t.Errorf("swap 2 selects ns/%s: %v, want %v", vol, got, want)
		}
	}
}

// TestFIFODoesNotBlockReload: a FIFO appearing while the manager runs does
// not block a reload (a plain open would wait for a writer forever).
func TestFIFODoesNotBlockReload(t *testing.T) {
	e := newEnv(t, nil, nil)
	if err := syscall.Mkfifo(filepath.Join(e.dir, "x.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeModule(t, e.dir, "x", nil, manifest("release-policy", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := e.m.Reload(ctx); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Reload blocked on the FIFO")
	}
	if st := status(t, e.m, "x"); st.State != StateRefused || !strings.Contains(st.Refusal, "named pipe") {
		t.Fatalf("x: %s %q", st.State, st.Refusal)
	}
}
