package plugins

import (
	"context"
	"fmt"
	"testing"
)

// TestGuestMemoryBounded runs 100,000 calls of a policy that allocates
// 16 KiB of garbage per call on one instance (pool_size 1, no recycling by
// call count): the guest's memory must level off far below the cap, and the
// one instance must serve every call. (Garbage this small is collected even
// without yields; TestGuestMemoryBoundedLargeGarbage guards the SDK's yield
// rule with 256 KiB per call.) 100,000 calls take ~40 s on a loaded 2-core
// machine and several minutes under -race, so with -race (what `make test`
// runs) and with -short it runs 10,000 calls; `go test ./plugins/` without
// -race runs the full 100,000.
func TestGuestMemoryBounded(t *testing.T) {
	const capPages = 512
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 10_000
	}
	early, end, g := runAllocating(t, 16, capPages, n, 1000)
	t.Logf("%d calls: memory %d pages after 1000 calls, %d pages at the end (cap %d); instances created %d, recycled %d",
		n, early, end, capPages, g.created.Load(), g.recycled.Load())
	if g.created.Load() != 1 || g.recycled.Load() != 0 {
		t.Fatalf("instances created %d, recycled %d: want the one canary serving every call", g.created.Load(), g.recycled.Load())
	}
	if end > 2*early || end > capPages/2 {
		t.Fatalf("memory grew from %d to %d pages over %d calls (cap %d)", early, end, n, capPages)
	}
}

// runAllocating loads fault-policy with allocKiB of garbage per call in
// capPages of memory and one instance, calls it n times in allocate mode,
// and returns the memory after earlyAt calls and at the end, and the
// generation that served them.
func runAllocating(t *testing.T, allocKiB int, capPages uint32, n, earlyAt int) (early, end uint32, g *generation) {
	t.Helper()
	faulty := exampleWasm(t, "fault-policy")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "alloc", faulty, manifest("release-policy", fmt.Sprintf(`config = { alloc_kib = "%d" }
limits {
  memory_pages = %d
  call_timeout = "5s"
  pool_size    = 1
  max_calls    = 1000000
}`, allocKiB, capPages)))
	}, nil)
	ctx := context.Background()
	req := faultRequest("allocate")
	for i := 0; i < n; i++ {
		if _, err := e.m.DecideRelease(ctx, "alloc", req); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i == earlyAt {
			st, _ := e.m.StatusOf("alloc")
			early = st.MemoryPages
		}
	}
	st, _ := e.m.StatusOf("alloc")
	return early, st.MemoryPages, (*e.m.modules.Load())["alloc"].cur.Load()
}

// TestGuestMemoryReserved: an instance's linear memory is allocated at its
// cap when the instance is created, so the guest's memory.grow never copies
// it. The buffer's address stays put while the guest's heap grows; with
// wazero's default (grow by append) it moves. On Linux this holds through
// the mapping (linearmem_linux.go, where TestGuestMemoryMappedAboveReserve
// covers a cap above maxReservedPages too); elsewhere through reserveMemory,
// whose threshold the last assertion checks on every OS.
func TestGuestMemoryReserved(t *testing.T) {
	addr, pages, addr2, pages2 := growAndWatch(t, 256)
	if pages2 <= pages {
		t.Fatalf("memory did not grow (%d pages): the test no longer exercises memory.grow", pages2)
	}
	if addr2 != addr {
		t.Fatalf("memory moved when it grew from %d to %d pages: it was not reserved at its cap", pages, pages2)
	}
	if reserveMemory(maxReservedPages+1) || !reserveMemory(DefaultMemoryPages) {
		t.Fatal("reserveMemory: the default cap must be reserved, a cap above maxReservedPages not")
	}
}

// growAndWatch loads fault-policy with limits.memory_pages = capPages and
// one instance, and returns the address of its memory's first byte and its
// size in pages before and after 50 calls that grow the guest's heap.
func growAndWatch(t *testing.T, capPages int) (addr *byte, pages uint32, addr2 *byte, pages2 uint32) {
	t.Helper()
	faulty := exampleWasm(t, "fault-policy")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "alloc", faulty, manifest("release-policy", fmt.Sprintf(`config = { alloc_kib = "1024" }
limits {
  memory_pages = %d
  call_timeout = "5s"
  pool_size    = 1
}`, capPages)))
	}, nil)
	g := (*e.m.modules.Load())["alloc"].cur.Load()
	base := func() (*byte, uint32) {
		inst := g.takeIdle()
		defer g.putIdle(inst)
		b, ok := inst.mem.Read(0, 1)
		if !ok {
			t.Fatal("memory has no first byte")
		}
		return &b[0], inst.mem.Size() / pageSize
	}
	addr, pages = base()
	ctx := context.Background()
	req := faultRequest("allocate")
	for i := 0; i < 50; i++ {
		if _, err := e.m.DecideRelease(ctx, "alloc", req); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	addr2, pages2 = base()
	return addr, pages, addr2, pages2
}
