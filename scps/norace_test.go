//go:build !race

package scps

const raceEnabled = false
