package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Go's collector, left alone, lets the heap grow to twice what is live
// before it collects (GOGC=100). At 1,000,000 volumes the live state is
// about 1.7 GiB, so a server doing a burst of writes, a snapshot and a
// restore side by side reached 4.3-5.3 GiB, and three servers on one
// machine more than it could spare. A soft memory limit (GOMEMLIMIT) makes
// the collector work harder as the heap nears it instead. The agent sets
// one itself when the environment sets none: 90% of its cgroup's memory
// limit when it runs in a container with one (the rest for the stacks,
// the binary and the kernel's buffers), otherwise a quarter of the
// machine's memory (the JVM's default heap share on a machine it shares).
// An explicit GOMEMLIMIT wins, and GOMEMLIMIT=off keeps no limit. The
// limit is soft: the collector never takes more than half the CPU to hold
// it, and a restore lifts it while two states are live (host/state
// memlimit.go). README "Running a million volumes" says when to set it.

// memFiles are where the limits are read; tests replace them.
type memFiles struct {
	meminfo, cgroupV2, cgroupV1 string
}

var hostMemFiles = memFiles{
	meminfo:  "/proc/meminfo",
	cgroupV2: "/sys/fs/cgroup/memory.max",
	cgroupV1: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// defaultMemoryLimit is the limit the agent sets and where it came from
// (0: none, e.g. no /proc).
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

// ApplyDefaultMemoryLimit sets the agent's soft memory limit when
// GOMEMLIMIT is unset (see above) and logs the limit in effect. The binary
// calls it once at start; it is process-wide, so tests that run agents in
// one process leave it alone.
func (a *Agent) ApplyDefaultMemoryLimit() {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		a.logger.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return
	}
	limit, source := defaultMemoryLimit(hostMemFiles)
	if limit <= 0 {
		a.logger.Warn("no default memory limit: the machine's memory is unknown; set GOMEMLIMIT")
		return
	}
	debug.SetMemoryLimit(limit)
	a.logger.Info("memory limit set (GOMEMLIMIT unset)", "limit_mib", limit>>20, "from", source)
}
