package plugins

import (
	"slices"
	"sync"
	"time"
)

// latencyRing is how many recent call latencies feed the percentiles.
const latencyRing = 512

// stats are a module's call counters, kept across generations.
type stats struct {
	mu     sync.Mutex
	calls  uint64
	faults map[FaultKind]uint64
	ring   [latencyRing]time.Duration
	next   int
	filled bool
}

func (s *stats) record(d time.Duration, fault FaultKind) {
	s.mu.Lock()
	s.calls++
	if fault != "" {
		if s.faults == nil {
			s.faults = make(map[FaultKind]uint64)
		}
		s.faults[fault]++
	}
	if d > 0 {
		s.ring[s.next] = d
		s.next++
		if s.next == latencyRing {
			s.next, s.filled = 0, true
		}
	}
	s.mu.Unlock()
}

// snapshot returns calls, a copy of the fault counts and p50/p99.
func (s *stats) snapshot() (calls uint64, faults map[string]uint64, p50, p99 time.Duration) {
	s.mu.Lock()
	calls = s.calls
	faults = make(map[string]uint64, len(s.faults))
	for k, v := range s.faults {
		faults[string(k)] = v
	}
	n := s.next
	if s.filled {
		n = latencyRing
	}
	lat := slices.Clone(s.ring[:n])
	s.mu.Unlock()
	if len(lat) == 0 {
		return calls, faults, 0, 0
	}
	slices.Sort(lat)
	return calls, faults, lat[(len(lat)-1)*50/100], lat[(len(lat)-1)*99/100]
}
