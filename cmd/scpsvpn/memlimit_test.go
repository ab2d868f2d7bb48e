package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroup makes /proc/self/cgroup and a cgroup v2 hierarchy whose
// group for the service holds memoryMax, and returns their paths.
func fakeCgroup(t *testing.T, memoryMax string) (cgroupFile, root string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "cgroup")
	group := filepath.Join(root, "system.slice", "system-scpsvpn.slice", "scpsvpn@scps0.service")
	if err := os.MkdirAll(group, 0o755); err != nil {
		t.Fatal(err)
	}
	if memoryMax != "" {
		if err := os.WriteFile(filepath.Join(group, "memory.max"), []byte(memoryMax+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cgroupFile = filepath.Join(dir, "self-cgroup")
	if err := os.WriteFile(cgroupFile, []byte("0::/system.slice/system-scpsvpn.slice/scpsvpn@scps0.service\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cgroupFile, root
}

func TestCgroupMemoryMax(t *testing.T) {
	for _, tc := range []struct {
		name, memoryMax string
		want            int64
		ok              bool
	}{
		{"a limit", "536870912", 512 << 20, true},
		{"no limit", "max", 0, false},
		{"no memory controller", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cgroupFile, root := fakeCgroup(t, tc.memoryMax)
			got, ok := cgroupMemoryMax(cgroupFile, root)
			if got != tc.want || ok != tc.ok {
				t.Errorf("cgroupMemoryMax = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	// cgroup v1 only: no "0::" line.
	dir := t.TempDir()
	v1 := filepath.Join(dir, "self-cgroup")
	if err := os.WriteFile(v1, []byte("4:memory:/system.slice/x.service\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, ok := cgroupMemoryMax(v1, dir); ok {
		t.Errorf("cgroup v1: cgroupMemoryMax = %d, true; want no limit", got)
	}
}

func TestWarnMemoryLimit(t *testing.T) {
	cgroupFile, root := fakeCgroup(t, "536870912") // 512 MiB
	for _, tc := range []struct {
		budget int64
		warn   bool
	}{
		{256 << 20, false},
		{512<<20 - programMemory, false},
		{512<<20 - programMemory + 1, true},
		{1 << 30, true},
	} {
		var out bytes.Buffer
		warnMemoryLimit(slog.New(slog.NewTextHandler(&out, nil)), tc.budget, cgroupFile, root)
		if got := strings.Contains(out.String(), "raise MemoryMax="); got != tc.warn {
			t.Errorf("budget %d MiB under a 512 MiB limit: warned %v, want %v (log %q)", tc.budget>>20, got, tc.warn, out.String())
		}
	}
}
