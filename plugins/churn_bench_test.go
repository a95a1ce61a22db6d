package plugins

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// BenchmarkInstanceChurn is a Go guest's pool under instance churn: 4
// instances at memory_pages 256 (16 MiB each), replaced every 50 calls
// (max_calls), 4 callers at once, 8-claim requests. Reported: the Go heap
// in use and the process's resident memory after the calls (MiB, read
// after a GC), and the cost per call with the instance set-up amortised
// over 50 calls. The heap and RSS figures are what linear memory outside
// the Go heap changes (linearmem_linux.go); run one process per side to
// compare two builds.
//
//	go test -run '^$' -bench '^BenchmarkInstanceChurn$' -benchtime 4000x ./plugins/
func BenchmarkInstanceChurn(b *testing.B) {
	wasm := exampleWasm(b, "default-policy")
	e := newEnv(b, func(dir string) {
		writeModule(b, dir, "p", wasm, manifest("release-policy", `limits {
  memory_pages = 256
  call_timeout = "10s"
  pool_size    = 4
  max_calls    = 50
}`))
	}, nil)
	req := volumeRequest(8)
	ctx := context.Background()
	const callers = 4
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < b.N; i += callers {
				if _, err := e.m.DecideRelease(ctx, "p", req); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(procStatusMiB(b, "VmRSS"), "rss-MiB")
}

// procStatusMiB reads a kB field of /proc/self/status in MiB (0 where there
// is no such file).
func procStatusMiB(b *testing.B, field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatalf("%s: %v", field, fmt.Errorf("parse %q: %w", rest, err))
			}
			return kb / 1024
		}
	}
	return 0
}
