package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// programMemory is what the endpoint uses beyond its memory budget: the
// program itself, as the memory end-to-end test bounds it.
const programMemory = 64 << 20

// warnMemoryLimit says at start-up when the memory budget plus the
// program does not fit the memory the endpoint's cgroup may use (the
// unit's MemoryMax=): under load the kernel would kill the endpoint
// before the budget held it back. cgroupFile and root are as for
// cgroupMemoryMax.
func warnMemoryLimit(log *slog.Logger, budget int64, cgroupFile, root string) {
	limit, ok := cgroupMemoryMax(cgroupFile, root)
	if !ok || budget+programMemory <= limit {
		return
	}
	log.Warn("interface.memory does not fit the service's memory limit: raise MemoryMax= (systemctl edit) or lower memory",
		"memory", budget, "memory_max", limit, "program", programMemory)
}

// cgroupMemoryMax reads memory.max of the cgroup v2 group that cgroupFile
// (/proc/self/cgroup) names, under the hierarchy mounted at root; ok is
// false without cgroup v2 or without a limit.
func cgroupMemoryMax(cgroupFile, root string) (limit int64, ok bool) {
	b, err := os.ReadFile(cgroupFile)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		group, found := strings.CutPrefix(line, "0::")
		if !found {
			continue
		}
		v, err := os.ReadFile(filepath.Join(root, group, "memory.max"))
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		return n, err == nil // "max": no limit
	}
	return 0, false
}
