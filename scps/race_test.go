//go:build race

package scps

// raceEnabled: the race detector slows the simulator about fivefold, so the
// heaviest simulations scale their link rates down.
const raceEnabled = true
