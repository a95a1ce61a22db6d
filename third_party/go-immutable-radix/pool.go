package iradix

import "sync"

// volhost's fourth change to the fork: a write transaction's two maps, the
// nodes it made (writableSet) and the mutation channels its commit closes
// (trackChannels), are taken from a pool and given back when the
// transaction is done with them, instead of made anew by every
// transaction. go-memdb starts a radix transaction for every index a write
// touches, so a claim and its release made dozens of each: pooled, the
// store allocates 0.86 of the bytes per claim cycle
// (BenchmarkClaimCycleBySize), garbage every server's collector marks the
// whole live heap to reclaim.
//
// A map goes back only once nothing can reach it: the writable set when
// CommitOnly or Clone forgets it (the transaction's nodes are exposed
// from then on, so the set is never read again), the channels once Notify
// has closed them. Maps grown past pooledMapMax are left to the collector,
// so a large transaction (a restore, a bulk registration) does not keep
// its tables alive in the pool.

const pooledMapMax = 1024

// poolMaps is false only in a test that measures what the pools save.
var poolMaps = true

var (
	writablePool = sync.Pool{New: func() any { return writableSet{} }}
	trackPool    = sync.Pool{New: func() any { return map[*mutateCh]struct{}{} }}
)

func newWritableSet() writableSet {
	if !poolMaps {
		return writableSet{}
	}
	return writablePool.Get().(writableSet)
}

// releaseWritableSet gives s back to the pool; s must not be used after.
func releaseWritableSet(s writableSet) {
	if s == nil || len(s) > pooledMapMax || !poolMaps {
		return
	}
	clear(s)
	writablePool.Put(s)
}

func newTrackChannels() map[*mutateCh]struct{} {
	if !poolMaps {
		return map[*mutateCh]struct{}{}
	}
	return trackPool.Get().(map[*mutateCh]struct{})
}

// releaseTrackChannels gives m back to the pool; m must not be used after.
func releaseTrackChannels(m map[*mutateCh]struct{}) {
	if m == nil || len(m) > pooledMapMax || !poolMaps {
		return
	}
	clear(m)
	trackPool.Put(m)
}
