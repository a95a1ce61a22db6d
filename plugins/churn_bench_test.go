package plugins

import (
	"context"
	"runtime"
	"testing"

	"github.com/volhost/volhost/internal/testutil"
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
	err := testutil.FanOut(callers, b.N, func(int) error {
		_, err := e.m.DecideRelease(ctx, "p", req)
		return err
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(testutil.RSSMiB(), "rss-MiB")
}
