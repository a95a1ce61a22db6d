//go:build race

package state

// raceOn: the race detector is on; sync.Pool then drops what it is given
// at random, so allocation counts mean nothing.
const raceOn = true
