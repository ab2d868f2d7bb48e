//go:build race

package e2e

// raceEnabled: the race detector slows the in-process link emulator
// several fold; tests that need it to carry a high rate run without it
// (test.sh runs them from its race-free test binary).
const raceEnabled = true
