package configs

// This file owns the [interface] memory key: the endpoint's memory budget
// and its default, derived from the machine.

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"scpsvpn/scps/settings"
)

// Bounds and default of [interface] memory; the most is the transport's
// (settings.MaxMemory).
const (
	// MinMemory leaves each part of the endpoint (netstack buffers, an
	// association's streams) enough to carry one flow at full speed.
	MinMemory = 32 << 20
	// DefaultMemoryShare: without the key, the budget is this fraction of
	// the machine's memory (a gateway shares its box with little else, but
	// the kernel's socket buffers and page cache need room too), between
	// MinDefaultMemory and MaxDefaultMemory.
	DefaultMemoryShare = 4
	MinDefaultMemory   = 64 << 20
	MaxDefaultMemory   = 4 << 30
	// fallbackMachineMemory is assumed when the machine's memory cannot be
	// read (not Linux).
	fallbackMachineMemory = 1 << 30
)

// memoryKey validates [interface] memory; empty means DefaultMemory.
func memoryKey(s string) (int64, error) {
	if s == "" {
		return DefaultMemory(), nil
	}
	n, err := sizeKey("interface.memory", s)
	if err != nil {
		return 0, err
	}
	if n < MinMemory || n > settings.MaxMemory {
		return 0, fmt.Errorf("interface.memory: %q is out of range: use %s..%s, e.g. \"256MiB\", or leave it out (a quarter of the machine's memory)", s, FormatSize(MinMemory), FormatSize(settings.MaxMemory))
	}
	return n, nil
}

// DefaultMemory is the budget when [interface] memory is not set: a
// quarter of the machine's memory, 64 MiB to 4 GiB.
func DefaultMemory() int64 {
	m := machineMemory()
	return min(max(m/DefaultMemoryShare, MinDefaultMemory), MaxDefaultMemory)
}

// machineMemory reads MemTotal from /proc/meminfo.
func machineMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return fallbackMachineMemory
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil || kb <= 0 {
			break
		}
		return kb << 10
	}
	return fallbackMachineMemory
}
