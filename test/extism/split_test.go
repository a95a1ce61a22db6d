package extism

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

// BenchmarkGuestSplit splits a guest call into its parts, straight through
// wazero (no plugins.Manager, no host instrumentation, no timeout), warm
// and with the CPU caches cold (64 MiB written before each call), the sides
// interleaved round after round like BenchmarkCallRatios:
//
//   - go-empty: a Go guest answering at once (split/empty): the fixed cost
//     of a Go guest call (volhost_buffer, the export, the SDK);
//   - go-decode: a Go guest that only decodes the request (split/decode);
//   - go: the default-policy Go guest (HandleReleaseInto);
//   - as: the AssemblyScript default policy (make plugins builds it);
//   - as-baseline: with VOLHOST_CALL_BASELINE_AS=FILE.wasm, that
//     AssemblyScript module too (a before/after of the guest's own code).
//
// It is where docs/benchmarks-history.md's "Guest side of a call" split comes from:
//
//	make plugins
//	cd test/extism && go test -run '^$' -bench '^BenchmarkGuestSplit$' -benchtime 1x .
func BenchmarkGuestSplit(b *testing.B) {
	rounds := envInt(b, "VOLHOST_ROUNDS", 5)
	calls := envInt(b, "VOLHOST_ROUND_CALLS", 2000)
	in := volumeRequest().MarshalAppend(nil)
	ctx := context.Background()
	wd, _ := os.Getwd()
	wasm := map[string]string{
		"go-empty":  buildSplitGuest(b, wd, "./split/empty"),
		"go-decode": buildSplitGuest(b, wd, "./split/decode"),
		"go":        filepath.Join(buildDir, "default-policy.wasm"),
		"as":        filepath.Join(repoRoot, "examples", "plugins", "build", "as-default-policy.wasm"),
	}
	junk := make([]byte, 64<<20)
	evict := func() {
		for i := 0; i < len(junk); i += 64 {
			junk[i]++
		}
	}
	names := []string{"go-empty", "go-decode", "go", "as"}
	if p := os.Getenv("VOLHOST_CALL_BASELINE_AS"); p != "" {
		wasm["as-baseline"] = p
		names = append(names, "as-baseline")
	}
	var sides []*side
	for _, name := range names {
		raw, err := os.ReadFile(wasm[name])
		if err != nil {
			b.Fatalf("%v (the AssemblyScript guest: run make plugins first)", err)
		}
		mod := instantiateRaw(b, ctx, raw)
		call := func() error {
			mod.call(b, ctx, abi.ExportDecideRelease, in)
			return nil
		}
		for range 500 {
			_ = call()
		}
		sides = append(sides,
			&side{name: name, calls: calls, call: call},
			&side{name: name + "-cold", calls: max(calls/10, 50), between: evict, call: call})
	}
	b.ResetTimer()
	for b.Loop() {
		for range rounds {
			for _, s := range sides {
				if err := s.round(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.StopTimer()
	var md strings.Builder
	fmt.Fprintf(&md, "%d rounds, straight through wazero (no host instrumentation): warm sides %d calls, cold %d.\n\n", rounds, calls, max(calls/10, 50))
	md.WriteString("| side | p50 ns: median [min-max] | mean ns: median [min-max] |\n| --- | ---: | ---: |\n")
	for _, s := range sides {
		fmt.Fprintf(&md, "| %s | %s | %s |\n", s.name, spread(s.p50s), spread(s.means))
		b.ReportMetric(median(s.p50s), s.name+"-p50-ns")
	}
	if _, ok := wasm["as-baseline"]; ok {
		// Per round, the guest against its baseline, warm and cold.
		byName := map[string]*side{}
		for _, s := range sides {
			byName[s.name] = s
		}
		md.WriteString("\n| ratio, per round | of p50s: median [min-max] | of means: median [min-max] |\n| --- | ---: | ---: |\n")
		for _, pair := range [][2]string{{"as", "as-baseline"}, {"as-cold", "as-baseline-cold"}} {
			num, den := byName[pair[0]], byName[pair[1]]
			p50s, means := make([]float64, rounds), make([]float64, rounds)
			for i := range rounds {
				p50s[i], means[i] = num.p50s[i]/den.p50s[i], num.means[i]/den.means[i]
			}
			fmt.Fprintf(&md, "| %s / %s | %s | %s |\n", pair[0], pair[1], spreadRatio(p50s), spreadRatio(means))
			b.ReportMetric(median(p50s), pair[0]+"/"+pair[1]+"-p50")
		}
	}
	fmt.Print(md.String()) // not b.Logf: a benchmark's log is cut to its first lines
}

// buildSplitGuest builds the Go guest in pkg (a folder of this module)
// into the test's build directory and returns its path.
func buildSplitGuest(tb testing.TB, dir, pkg string) string {
	tb.Helper()
	out := filepath.Join(buildDir, filepath.Base(pkg)+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

// BenchmarkNativeParts is the Go guest's three parts run natively on the
// same 8-claim request, for BenchmarkGuestSplit's comparison: the
// in-place decode into a reused request, DecideInto a reused response,
// and the response's encoding.
func BenchmarkNativeParts(b *testing.B) {
	in := volumeRequest().MarshalAppend(nil)
	var req abi.PolicyRequest
	var resp abi.PolicyResponse
	if err := req.UnmarshalBorrowing(in); err != nil {
		b.Fatal(err)
	}
	defaultpolicy.DecideInto(&req, &resp)
	var out []byte
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			_ = req.UnmarshalBorrowing(in)
		}
	})
	b.Run("decide", func(b *testing.B) {
		for b.Loop() {
			defaultpolicy.DecideInto(&req, &resp)
		}
	})
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			out = resp.MarshalAppend(out[:0])
		}
	})
}
