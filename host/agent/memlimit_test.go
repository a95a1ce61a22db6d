package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// The default limit: 90% of a cgroup limit below the machine's memory
// (v2 first, then v1), otherwise a quarter of the machine's memory; "max"
// and v1's "unlimited" number are no limit; nothing readable is none.
func TestDefaultMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	meminfo := write("meminfo", "MemTotal:       16777216 kB\nMemFree:         1000 kB\n") // 16 GiB
	none := filepath.Join(dir, "absent")
	for _, c := range []struct {
		name string
		f    memFiles
		want int64
	}{
		{"no cgroup limit", memFiles{meminfo, none, none}, 4 << 30},
		{"cgroup v2 max", memFiles{meminfo, write("v2max", "max\n"), none}, 4 << 30},
		{"cgroup v1 unlimited", memFiles{meminfo, none, write("v1max", "9223372036854771712\n")}, 4 << 30},
		{"cgroup v2 limit", memFiles{meminfo, write("v2", "2147483648\n"), none}, 2147483648 / 10 * 9},
		{"cgroup v1 limit", memFiles{meminfo, none, write("v1", "1073741824\n")}, 1073741824 / 10 * 9},
		{"nothing readable", memFiles{none, none, none}, 0},
	} {
		if got, src := defaultMemoryLimit(c.f); got != c.want {
			t.Errorf("%s: %d (%s), want %d", c.name, got, src, c.want)
		}
	}
}
