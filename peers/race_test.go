//go:build race

package peers

// raceEnabled: the race detector slows hashing about tenfold, so the flood
// tests scale their message counts down (and their budgets with them).
const raceEnabled = true
