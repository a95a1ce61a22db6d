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

// set is a set of pointers: a writable set, a transaction's channels.
type set[K comparable] map[K]struct{}

// channelSet is the mutation channels a commit closes.
type channelSet = set[*mutateCh]

// setPool keeps emptied sets of one kind.
type setPool[K comparable] struct{ p sync.Pool }

var (
	writablePool setPool[*Node]
	trackPool    setPool[*mutateCh]
)

// get is an empty set, from the pool when it has one.
func (sp *setPool[K]) get() set[K] {
	if poolMaps {
		if s, ok := sp.p.Get().(set[K]); ok {
			return s
		}
	}
	return set[K]{}
}

// put gives s back, emptied; s must not be used after.
func (sp *setPool[K]) put(s set[K]) {
	if s == nil || len(s) > pooledMapMax || !poolMaps {
		return
	}
	clear(s)
	sp.p.Put(s)
}
