// Package testenv holds what the root-only tests under cmd share: the rule
// that they skip without root except under CI=true, and building the real
// binary they run. Tests import it; the scpsvpn binary does not.
package testenv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"
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
// When SCPSVPN_BINARY names an executable (test.sh builds it once for every
// package that runs it), that one is returned instead.
func BuildBinary(dir string) (string, error) {
	if bin := os.Getenv("SCPSVPN_BINARY"); bin != "" {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("SCPSVPN_BINARY=%q: not an executable file (unset it to build one)", bin)
		}
		return bin, nil
	}
	bin := filepath.Join(dir, "scpsvpn")
	out, err := exec.Command("go", "build", "-o", bin, "scpsvpn/cmd/scpsvpn").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build scpsvpn: %v\n%s", err, out)
	}
	return bin, nil
}

// SmokeBinary prepares a smoke run of the real binary: it needs root, is
// skipped in -short, and gets the binary from BuildBinary.
func SmokeBinary(t *testing.T) string {
	t.Helper()
	RequireRoot(t, "network namespaces, TUN")
	if testing.Short() {
		t.Skip("smoke run of the real binary; not in -short")
	}
	bin, err := BuildBinary(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// ParseFlags runs cmd (a subcommand of scpsvpn) on args with its action
// replaced by parse, which turns the parsed flags into options, and returns
// those: the flag handling of a command tested without running it.
func ParseFlags[T any](cmd *cli.Command, parse func(*cli.Context) (T, error), args ...string) (T, error) {
	var got T
	cmd.Action = func(c *cli.Context) (err error) {
		got, err = parse(c)
		return err
	}
	app := &cli.App{Name: "scpsvpn", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	err := app.Run(append([]string{"scpsvpn", cmd.Name}, args...))
	return got, err
}
