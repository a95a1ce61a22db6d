package main

import "testing"

func TestPerRound(t *testing.T) {
	for _, tc := range []struct {
		a, b []float64
		want string
	}{
		{[]float64{2, 9, 4}, []float64{1, 3, 1}, "3.00 [2.00-4.00]"},
		{[]float64{1, 1}, []float64{2}, "0.50 [0.50-0.50]"},    // rounds both have
		{[]float64{1, 5}, []float64{0, 1}, "5.00 [5.00-5.00]"}, // a zero round is left out
		{nil, []float64{1}, "-"},
	} {
		if got := perRound(tc.a, tc.b, "%.2f"); got != tc.want {
			t.Errorf("perRound(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}
