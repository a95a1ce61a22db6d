//go:build race

package plugins

// raceEnabled: the race detector slows the host side of every call ~5x.
const raceEnabled = true
