package plugins

import (
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestBreaker(t *testing.T) {
	clock := clockwork.NewFakeClock()
	b := newBreaker(clock, 3, 30*time.Second)
	step := func(what string, wantOK, wantProbe bool) bool {
		t.Helper()
		ok, probe := b.allow()
		if ok != wantOK || probe != wantProbe {
			t.Fatalf("%s: allow() = %v, %v; want %v, %v", what, ok, probe, wantOK, wantProbe)
		}
		return probe
	}
	// Two faults and a success: the count restarts.
	for i := 0; i < 2; i++ {
		step("closed", true, false)
		if ch := b.done(false, true); ch != 0 {
			t.Fatalf("fault %d changed state: %d", i, ch)
		}
	}
	step("closed", true, false)
	b.done(false, false)
	// Three consecutive faults open it.
	for i := 0; i < 3; i++ {
		step("closed", true, false)
		ch := b.done(false, true)
		if want := map[bool]int{true: 1, false: 0}[i == 2]; ch != want {
			t.Fatalf("fault %d: state change %d, want %d", i, ch, want)
		}
	}
	step("open", false, false)
	clock.Advance(29 * time.Second)
	step("still cooling", false, false)
	clock.Advance(time.Second)
	probe := step("half-open probe", true, true)
	step("second caller while probing", false, false)
	// The probe fails: open for another full cool-down.
	if ch := b.done(probe, true); ch != 0 {
		t.Fatalf("failed probe reported change %d", ch)
	}
	step("reopened", false, false)
	clock.Advance(30 * time.Second)
	probe = step("second probe", true, true)
	if ch := b.done(probe, false); ch != -1 {
		t.Fatalf("successful probe: change %d, want -1 (closed)", ch)
	}
	step("closed again", true, false)
	if b.isOpen() {
		t.Fatal("isOpen after close")
	}
}

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name        string
		writes      []int // sizes of successive writes of distinct letters
		wantLen     int
		wantElision bool
	}{
		{"small", []int{10, 20}, 30, false},
		{"head and tail exactly", []int{headLimit + tailLimit}, headLimit + tailLimit, false},
		{"one huge", []int{3 * outputLimit}, headLimit + tailLimit, true},
		{"overflow across writes", []int{headLimit + tailLimit - 1, 100}, headLimit + tailLimit, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tb tailBuffer
			var last byte
			for i, n := range tt.writes {
				last = byte('a' + i)
				p := make([]byte, n)
				for j := range p {
					p[j] = last
				}
				if got, _ := tb.Write(p); got != n {
					t.Fatalf("Write returned %d, want %d", got, n)
				}
			}
			if tb.Len() != tt.wantLen {
				t.Fatalf("kept %d bytes, want %d", tb.Len(), tt.wantLen)
			}
			s := tb.String()
			if s[0] != 'a' || s[len(s)-1] != last {
				t.Fatalf("output starts %q ends %q: want the first write's head and the last write's tail", s[0], s[len(s)-1])
			}
			if got := strings.Contains(s, elision); got != tt.wantElision {
				t.Fatalf("elision marker present = %v, want %v", got, tt.wantElision)
			}
			tb.Reset()
			if tb.Len() != 0 || tb.String() != "" {
				t.Fatal("Reset kept bytes")
			}
		})
	}
}

func TestStatsPercentiles(t *testing.T) {
	var s stats
	for i := 1; i <= 100; i++ {
		s.record(time.Duration(i)*time.Millisecond, "")
	}
	s.record(time.Millisecond, FaultTrap)
	calls, faults, p50, p99 := s.snapshot()
	if calls != 101 || faults["trap"] != 1 {
		t.Fatalf("calls %d faults %v", calls, faults)
	}
	if p50 < 49*time.Millisecond || p50 > 51*time.Millisecond || p99 < 98*time.Millisecond {
		t.Fatalf("p50 %v p99 %v", p50, p99)
	}
}
