package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jonboulle/clockwork"

	"github.com/volhost/volhost/host/state"
)

// Go's collector, left alone, lets the heap grow to twice what is live
// before it collects (GOGC=100). At 1,000,000 volumes the live state is
// over a gigabyte, so a server doing a burst of writes, a snapshot and a
// restore side by side reached 3.7-5.3 GiB of RSS, and three servers on
// one machine more than it could spare. A soft memory limit (GOMEMLIMIT)
// makes the collector work harder as the heap nears it instead. When the
// environment sets none the agent keeps one itself (memoryLimitFor):
//
//   - its share of the machine: 90% of its cgroup's memory limit when it
//     runs in a container with one (the rest for the stacks, the binary
//     and the kernel's buffers), otherwise a quarter of the machine's
//     memory (the JVM's default heap share on a machine it shares);
//   - within it, a server's budget of 2 GiB (memoryBudget: the target of
//     RSS 2.5 GiB at 1,000,000 volumes leaves room for the raft log's
//     mapped file and what is not heap), so the limit binds at the
//     state's size, where the share of a large machine never did;
//   - never less than the live heap and a quarter (gcHeadroom): a
//     state that outgrows the budget raises the limit with it instead of
//     running the collector back to back (the limit is soft: Go gives the
//     collector at most half the CPU and lets the heap pass the limit,
//     but half the CPU is a server that cannot keep up).
//
// The live heap is read every memoryLimitEvery from runtime/metrics and
// the limit moved when it is off by more than 1/32. An explicit
// GOMEMLIMIT wins, and GOMEMLIMIT=off keeps no limit. A restore lifts the
// limit while two states are live and puts back the latest one set
// (host/state memlimit.go). README "Running a million volumes" says when
// to set it.

// memFiles are where the limits are read; tests replace them.
type memFiles struct {
	meminfo, cgroupV2, cgroupV1 string
}

var hostMemFiles = memFiles{
	meminfo:  "/proc/meminfo",
	cgroupV2: "/sys/fs/cgroup/memory.max",
	cgroupV1: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// defaultMemoryLimit is the agent's share of the machine's memory and
// where it came from (0: unknown, e.g. no /proc).
func defaultMemoryLimit(f memFiles) (int64, string) {
	total := memTotal(f.meminfo)
	for _, p := range []string{f.cgroupV2, f.cgroupV1} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2) or a huge number (v1) is no limit.
		if err != nil || n <= 0 || (total > 0 && n >= total) {
			continue
		}
		return n / 10 * 9, "90% of the cgroup memory limit " + p
	}
	if total <= 0 {
		return 0, ""
	}
	return total / 4, "a quarter of the machine's memory"
}

// memTotal reads MemTotal from /proc/meminfo, in bytes (0 if unknown).
func memTotal(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}

const (
	memoryBudget     = 2 << 30
	memoryLimitEvery = 5 * time.Second
)

// gcHeadroom is the least room the limit leaves above the live heap: a
// quarter of it, so the collector runs at most about four times as often
// as with no limit at all (GOGC=100 leaves the whole live heap).
func gcHeadroom(live int64) int64 { return live / 4 }

// memoryLimitFor is the soft limit for a process with this share of the
// machine (defaultMemoryLimit) and this live heap: the budget, within the
// share, raised to the live heap and its headroom, and never above the
// share (a container's cgroup kills a process past its limit whatever
// the collector does).
func memoryLimitFor(share, live int64) int64 {
	return min(share, max(int64(memoryBudget), live+gcHeadroom(live)))
}

// memoryGovernor keeps the default limit in step with the live heap.
type memoryGovernor struct {
	share int64
	live  func() int64 // the live heap after the last collection
	set   func(int64)
	limit int64 // as last set
}

// step sets the limit for the live heap now, if it moved by more than a
// 32nd, and answers whether it set one.
func (g *memoryGovernor) step() bool {
	want := memoryLimitFor(g.share, g.live())
	if d := want - g.limit; g.limit != 0 && d < g.limit/32 && -d < g.limit/32 {
		return false
	}
	g.limit = want
	g.set(want)
	return true
}

// run steps every memoryLimitEvery until ctx ends.
func (g *memoryGovernor) run(ctx context.Context, clock clockwork.Clock, logger hclog.Logger) {
	t := clock.NewTicker(memoryLimitEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			if g.step() {
				logger.Debug("memory limit moved with the live heap", "limit_mib", g.limit>>20)
			}
		}
	}
}

// liveHeap is the heap the last collection found live, in bytes.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// ApplyDefaultMemoryLimit sets the agent's soft memory limit when
// GOMEMLIMIT is unset (see above), logs the limit in effect, and has Start
// keep it in step with the live heap. The binary calls it once at start;
// the limit is process-wide, so tests that run agents in one process
// leave it alone.
func (a *Agent) ApplyDefaultMemoryLimit() {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		a.logger.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return
	}
	share, source := defaultMemoryLimit(hostMemFiles)
	if share <= 0 {
		a.logger.Warn("no default memory limit: the machine's memory is unknown; set GOMEMLIMIT")
		return
	}
	a.memory = &memoryGovernor{share: share, live: liveHeap, set: state.SetMemoryLimit}
	a.memory.step()
	a.logger.Info("memory limit set (GOMEMLIMIT unset)", "limit_mib", a.memory.limit>>20,
		"share_mib", share>>20, "share_from", source, "budget_mib", memoryBudget>>20)
}
