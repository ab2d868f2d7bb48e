package configs

// This file owns the [interface] memory key: the endpoint's memory budget,
// its default, derived from the machine, and how it is split. The
// netstack's TCP buffers (and the packets it holds for SYN-cookie
// flows) take a quarter; each configured peer an even share of the rest,
// for its association's streams and its receive queue. A peer needs at
// least PeerMemoryMin, so the budget must hold that for every peer: a
// budget set too small for the peers is refused, and the default grows
// to fit them. tunnel/memory.go applies the split.

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

// The split of the budget among peers.
const (
	// MinRxQueueMemory is the least a peer's receive queue may hold: its
	// decrypted packets waiting for the association (tunnel/peerrx.go).
	MinRxQueueMemory = 256 << 10
	// PeerMemoryMin is the least part of the budget a peer takes: what
	// its association needs (settings.MinMemory) and its receive queue's
	// least.
	PeerMemoryMin = settings.MinMemory + MinRxQueueMemory
)

// StackMemory is the netstack's part of a budget of total bytes.
func StackMemory(total int64) int64 { return total / 4 }

// PeerMemory is one peer's part of a budget of total bytes with peers
// peers configured: an even share of what the netstack leaves.
func PeerMemory(total int64, peers int) int64 {
	return (total - StackMemory(total)) / int64(max(peers, 1))
}

// MemoryFor is the least budget, in whole MiB, that gives each of peers
// peers PeerMemoryMin.
func MemoryFor(peers int) int64 {
	const mib = 1 << 20
	n := (int64(max(peers, 1))*PeerMemoryMin*4/3 + mib - 1) / mib * mib
	for PeerMemory(n, peers) < PeerMemoryMin {
		n += mib
	}
	return n
}

// memoryKey validates [interface] memory for peers peers; empty means
// DefaultMemory, or what the peers need if that is more.
func memoryKey(s string, peers int) (int64, error) {
	if s == "" {
		return max(DefaultMemory(), MemoryFor(peers)), nil
	}
	n, err := sizeKey("interface.memory", s)
	if err != nil {
		return 0, err
	}
	if n < MinMemory || n > settings.MaxMemory {
		return 0, fmt.Errorf("interface.memory: %q is out of range: use %s..%s, e.g. \"256MiB\", or leave it out (a quarter of the machine's memory)", s, FormatSize(MinMemory), FormatSize(settings.MaxMemory))
	}
	if err := MemoryHolds(n, peers); err != nil {
		return 0, fmt.Errorf("interface.memory: %q %w, or leave it out", s, err)
	}
	return n, nil
}

// MemoryHolds reports, as an error that says what to do, whether a
// budget of total bytes gives each of peers peers PeerMemoryMin.
func MemoryHolds(total int64, peers int) error {
	if PeerMemory(total, peers) >= PeerMemoryMin {
		return nil
	}
	return fmt.Errorf("cannot hold %d peers: each needs %.2f MiB beside the netstack's quarter; use at least \"%s\"",
		peers, float64(PeerMemoryMin)/(1<<20), FormatSize(MemoryFor(peers)))
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
