//go:build race

package linkemu

// The race detector slows the packet path several times over.
func init() { timingSlack = 4 }
