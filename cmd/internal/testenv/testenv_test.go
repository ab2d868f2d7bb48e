package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRequireRootSkipsOrFails runs RequireRoot in a child test process as
// user nobody and checks that it skips, and that under CI=true it fails.
func TestRequireRootSkipsOrFails(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		RequireRoot(t, "child")
		t.Log("ran as root")
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the child as another user")
	}
	// The go-build directory is private: copy the test binary where
	// nobody may run it.
	dir, err := os.MkdirTemp("", "testenv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "child.test")
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ci := range []string{"", "true"} {
		cmd := exec.Command(exe, "-test.run=^TestRequireRootSkipsOrFails$", "-test.v")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+ci)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		switch {
		case ci == "" && (err != nil || !strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "needs root (child)")):
			t.Errorf("without CI: %v\n%s", err, out)
		case ci == "true" && (err == nil || !strings.Contains(string(out), "CI=true forbids skipping")):
			t.Errorf("under CI=true: %v\n%s", err, out)
		}
	}
}
