package plugins

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompilationCacheMustBePrivate: the compilation cache holds native
// code checked only by a CRC, so a directory its group or others may
// write would let them run code in the agent under any module's key (a
// signed module_source's included). Such a directory is refused, naming
// why; a missing one is created private; a private one is used.
func TestCompilationCacheMustBePrivate(t *testing.T) {
	modDir := t.TempDir()
	open := func(cache string) error {
		m, err := NewManager(context.Background(), Options{Dir: modDir, CacheDir: cache})
		if err == nil {
			m.Close(context.Background())
		}
		return err
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := open(shared); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Fatalf("a world-writable cache: %v, want it refused", err)
	}
	missing := filepath.Join(t.TempDir(), "new", "cache")
	if err := open(missing); err != nil {
		t.Fatalf("a missing cache: %v", err)
	}
	if fi, err := os.Stat(missing); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the created cache: %v %v, want mode 0700", fi.Mode().Perm(), err)
	}
	if err := open(missing); err != nil {
		t.Fatalf("a private cache: %v", err)
	}
}
