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

// TestBuildBinaryTakesGiven: with SCPSVPN_BINARY set, BuildBinary returns
// that executable without building, and refuses a path that is not one.
func TestBuildBinaryTakesGiven(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "given")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SCPSVPN_BINARY", exe)
	if got, err := BuildBinary(t.TempDir()); err != nil || got != exe {
		t.Errorf("BuildBinary = %q, %v; want %q", got, err, exe)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{plain, dir, filepath.Join(dir, "missing")} {
		t.Setenv("SCPSVPN_BINARY", bad)
		if got, err := BuildBinary(t.TempDir()); err == nil || !strings.Contains(err.Error(), "SCPSVPN_BINARY") {
			t.Errorf("SCPSVPN_BINARY=%s: BuildBinary = %q, %v; want an error naming SCPSVPN_BINARY", bad, got, err)
		}
	}
}
