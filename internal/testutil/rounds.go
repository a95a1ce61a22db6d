package testutil

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Spread is a benchmark figure the project reports (BENCHMARKS.md): the
// median of the rounds with their min and max, never one run's value.
type Spread struct{ Median, Min, Max float64 }

// SpreadOf summarises xs; it panics on none, a benchmark bug.
func SpreadOf(xs []float64) Spread {
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// String is "median [min-max]" with three significant digits.
func (s Spread) String() string { return s.Text("%.3g") }

// Text is "median [min-max]" with each number in format (say "%.0f" for a
// rate in the thousands, which String would write as 4.54e+03).
func (s Spread) Text(format string) string {
	return fmt.Sprintf(format+" ["+format+"-"+format+"]", s.Median, s.Min, s.Max)
}

// ReportSpread reports xs as b's metric unit (the median) with min-unit
// and max-unit beside it.
func ReportSpread(b *testing.B, xs []float64, unit string) {
	s := SpreadOf(xs)
	b.ReportMetric(s.Median, unit)
	b.ReportMetric(s.Min, "min-"+unit)
	b.ReportMetric(s.Max, "max-"+unit)
}

// FanOut runs fn(i) for every i in [0, n) from workers goroutines (worker
// w takes w, w+workers, ...; a worker stops at its first error) and, once
// all have ended, returns the first error one of them met.
func FanOut(workers, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// RSSMiB is the process's resident memory (VmRSS) in MiB, 0 where
// /proc/self/status cannot be read.
func RSSMiB() float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// Interleave runs every side once per round, in turn, for rounds rounds,
// and answers each side's figures by round (out[side][round]). Sides
// measured in alternation share the machine's load, so their per-round
// ratios (Ratios) are the figures to trust on a busy machine, not their
// absolute values.
func Interleave(rounds int, sides ...func() float64) [][]float64 {
	out := make([][]float64, len(sides))
	for range rounds {
		for i, side := range sides {
			out[i] = append(out[i], side())
		}
	}
	return out
}

// Ratios is a[i]/b[i] for each round.
func Ratios(a, b []float64) []float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return r
}
