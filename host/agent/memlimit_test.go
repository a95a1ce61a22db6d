package agent

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"
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

// The limit: the budget within the share, raised to the live heap and a
// quarter, never above the share.
func TestMemoryLimitFor(t *testing.T) {
	const gib = int64(1) << 30
	for _, c := range []struct {
		name        string
		share, live int64
		want        int64
	}{
		{"a large machine, a small state: the budget", 6 * gib, 100 << 20, memoryBudget},
		{"1,000,000 volumes (about 1.2 GiB live): the budget binds", 6 * gib, 1200 << 20, memoryBudget},
		{"a state past the budget: the live heap and its headroom", 6 * gib, 2 * gib, 2*gib + gib/2},
		{"a small container: its share", 1 * gib, 100 << 20, 1 * gib},
		{"a state past the share: the share", 3 * gib, 4 * gib, 3 * gib},
	} {
		if got := memoryLimitFor(c.share, c.live); got != c.want {
			t.Errorf("%s: %d MiB, want %d MiB", c.name, got>>20, c.want>>20)
		}
	}
}

// The governor moves the limit with the live heap every memoryLimitEvery,
// and only when it moved by more than a 32nd.
func TestMemoryGovernorFollowsLiveHeap(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var live atomic.Int64
	live.Store(100 << 20)
	set := make(chan int64, 10)
	g := &memoryGovernor{share: 8 << 30, live: live.Load, set: func(l int64) { set <- l }}
	if !g.step() || <-set != memoryBudget {
		t.Fatal("the first step must set the budget")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.run(ctx, clock, hclog.NewNullLogger()) }()
	defer func() { cancel(); <-done }()

	tick := func() {
		t.Helper()
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(memoryLimitEvery)
	}
	live.Store(2 << 30) // the state outgrew the budget
	tick()
	select {
	case got := <-set:
		if want := int64(2<<30 + 512<<20); got != want {
			t.Fatalf("limit %d MiB, want %d MiB", got>>20, want>>20)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the governor did not move the limit after a tick")
	}
	live.Store(2<<30 + 10<<20) // within a 32nd: left alone
	tick()
	live.Store(1 << 30) // back under the budget
	tick()
	select {
	case got := <-set:
		if got != memoryBudget {
			t.Fatalf("limit %d MiB, want the budget", got>>20)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the governor did not move the limit back to the budget")
	}
	select {
	case got := <-set:
		t.Fatalf("an extra limit %d MiB was set", got>>20)
	default:
	}
}
