package linkemu

// The verdict trace the tests install in a pipe (pipe.trace): each packet
// judged by the emulator's own clock, which a loaded machine cannot skew.

import (
	"slices"
	"sync"
	"time"
)

// judged is the emulator's verdict on one of a test's packets.
type judged struct {
	stamp    time.Duration // what the test put in the packet (when it sent it, or a sequence number)
	read, at time.Duration // when the emulator read it and would deliver it
	v        verdict
}

// verdictNames names the verdicts in the tests' messages.
var verdictNames = [...]string{deliver: "deliver", deliverLate: "deliver-late", dropLoss: "loss", dropQueue: "queue", dropOutage: "outage"}

func (v verdict) String() string { return verdictNames[v] }

// verdictTrace records the forward pipe's verdict on every packet it
// reads: the test's packets (those stamp finds a stamp in) one by one,
// others (through a TUN, the kernel's IPv6 solicitations) only as counts.
type verdictTrace struct {
	stamp func(pkt []byte) (time.Duration, bool)
	mu    sync.Mutex
	ours  []judged
	other [dropOutage + 1]int // the others by verdict
}

// on installs the trace in e, which must not have started.
func (tr *verdictTrace) on(e *Emulator) {
	e.fwd.trace = func(pkt []byte, read, at time.Duration, v verdict) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if stamp, ok := tr.stamp(pkt); ok {
			tr.ours = append(tr.ours, judged{stamp, read, at, v})
		} else {
			tr.other[v]++
		}
	}
}

// snapshot returns the test's datagrams judged so far and the counts by
// verdict of every packet judged (the test's and the kernel's).
func (tr *verdictTrace) snapshot() ([]judged, [dropOutage + 1]int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	all := tr.other
	for _, j := range tr.ours {
		all[j.v]++
	}
	return slices.Clone(tr.ours), all
}
