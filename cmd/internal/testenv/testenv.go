// Package testenv holds what the root-only tests under cmd share: the rule
// that they skip without root except under CI=true, and building the real
// binary they run. Tests import it; the scpsvpn binary does not.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireRoot skips tb unless it runs as root; needs says what for (e.g.
// "network namespaces, TUN"). Under CI=true it fails instead: there a skip
// would hide a broken set-up.
func RequireRoot(tb testing.TB, needs string) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("this test needs root (%s); CI=true forbids skipping it", needs)
	}
	tb.Skipf("needs root (%s)", needs)
}

// BuildBinary builds the scpsvpn command into dir and returns its path.
func BuildBinary(dir string) (string, error) {
	bin := filepath.Join(dir, "scpsvpn")
	out, err := exec.Command("go", "build", "-o", bin, "scpsvpn/cmd/scpsvpn").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build scpsvpn: %v\n%s", err, out)
	}
	return bin, nil
}
