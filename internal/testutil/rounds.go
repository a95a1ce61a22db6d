package testutil

import (
	"fmt"
	"slices"
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
func (s Spread) String() string {
	return fmt.Sprintf("%.3g [%.3g-%.3g]", s.Median, s.Min, s.Max)
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
