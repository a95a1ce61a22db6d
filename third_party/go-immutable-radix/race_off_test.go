//go:build !race

package iradix

const raceEnabled = false
