//go:build !race

package state

const raceOn = false
