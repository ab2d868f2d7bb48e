package linkemu

// This file owns the emulator's configuration (Options, per-direction Dir),
// its validation and defaults, and the counters it reports.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"scpsvpn/configs"
)

// Dir is the link model of one direction.
type Dir struct {
	Rate         int64           // bits per second of whole IP packets; 0 = unlimited
	RateSchedule []RateStep      // rate changes since start; a step at 0 overrides Rate
	Delay        time.Duration   // one-way propagation delay
	Loss         float64         // random loss probability per packet
	BER          float64         // bit-error rate: a packet of n bytes is lost with 1-(1-BER)^(8n)
	Burst        *GilbertElliott // burst loss; nil = none
	Queue        int64           // drop-tail limit in bytes waiting for serialization; 0 = default
	// QueueTime, if set, is the drop-tail limit as time at the rate in
	// force: the limit follows a rate schedule, as a modem's buffer
	// sized in time does (one round trip at each rate). It overrides
	// Queue.
	QueueTime time.Duration
	Reorder   Reorder // packets held back so later ones overtake them; zero = none
}

// Reorder holds back a share of the packets: each one chosen is delivered
// Delay later than the model says, so the packets behind it overtake it,
// as on a path with two routes or a link-layer retransmission.
type Reorder struct {
	P     float64       // probability per packet
	Delay time.Duration // extra delay of a held-back packet
}

// Options configures an Emulator. Direction "forward" is A->B, "return" B->A.
type Options struct {
	NSA, NSB     string         // network namespace names (or paths) of the two sides; "" = current
	DevA, DevB   string         // TUN device names (<= 15 bytes)
	AddrA, AddrB []netip.Prefix // addresses assigned to the TUNs (with prefix length)
	MTU          int            // TUN MTU; 0 = 1500
	Fwd, Ret     Dir
	Outages      []Outage // scheduled outages, both directions
	OutageEvery  Periodic // periodic outages, both directions; zero = none
	Seed         uint64   // loss seed; 0 = pick one at random (Emulator.Seed tells which)
	Logger       *slog.Logger
}

// Defaults for fields left zero.
const (
	DefaultMTU = 1500
	// minQueue is the floor of the default queue: a few dozen full-size
	// packets, so a link with little delay still absorbs a burst.
	minQueue = 64 << 10
	// ringSlots bounds the packets held by one direction (queued or
	// propagating): 65536 full-size packets cover 1 Gbit/s over 600 ms.
	ringSlots = 1 << 16
)

// ErrInvalid marks configuration errors.
var ErrInvalid = errors.New("invalid link options")

// validate checks one direction; where names it in errors.
func (d *Dir) validate(where string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, where, fmt.Sprintf(format, a...))
	}
	switch {
	case d.Rate < 0 || d.Rate > configs.MaxRate:
		return bad("rate %d out of range", d.Rate)
	case d.Delay < 0 || d.Delay > time.Minute:
		return bad("delay %v out of range [0, 1m]", d.Delay)
	case d.Loss < 0 || d.Loss > 1:
		return bad("loss %v out of range [0, 1]", d.Loss)
	case d.BER < 0 || d.BER >= 1:
		return bad("bit-error rate %v out of range [0, 1)", d.BER)
	case d.Queue < 0:
		return bad("queue %d is negative", d.Queue)
	case d.Reorder.P < 0 || d.Reorder.P > 1:
		return bad("reorder probability %v out of range [0, 1]", d.Reorder.P)
	case d.Reorder.Delay < 0 || d.Reorder.Delay > time.Minute || (d.Reorder.P > 0 && d.Reorder.Delay == 0):
		return bad("reorder delay %v out of range (0, 1m]", d.Reorder.Delay)
	}
	for i, s := range d.RateSchedule {
		if s.Rate < 0 || s.Rate > configs.MaxRate || s.At < 0 || (i > 0 && s.At <= d.RateSchedule[i-1].At) {
			return bad("rate schedule step %d (%v:%s) out of order or range", i, s.At, configs.FormatRate(s.Rate))
		}
	}
	if b := d.Burst; b != nil {
		for _, p := range []float64{b.P, b.R, b.LossGood, b.LossBad} {
			if p < 0 || p > 1 {
				return bad("burst probabilities must be in [0, 1]")
			}
		}
	}
	return nil
}

// Validate checks the options and names the first problem.
func (o *Options) Validate() error {
	if o.MTU != 0 && (o.MTU < 576 || o.MTU > 65535) {
		return fmt.Errorf("%w: mtu %d out of range [576, 65535]", ErrInvalid, o.MTU)
	}
	for _, n := range []struct{ flag, name string }{{"dev-a", o.DevA}, {"dev-b", o.DevB}} {
		if n.name == "" || len(n.name) > 15 || strings.ContainsAny(n.name, "/ \t\n") {
			return fmt.Errorf("%w: %s %q must be 1-15 bytes without spaces or slashes", ErrInvalid, n.flag, n.name)
		}
	}
	if o.DevA == o.DevB && o.NSA == o.NSB {
		return fmt.Errorf("%w: dev-a and dev-b are both %q in the same namespace", ErrInvalid, o.DevA)
	}
	if err := o.Fwd.validate("forward"); err != nil {
		return err
	}
	if err := o.Ret.validate("return"); err != nil {
		return err
	}
	for _, w := range o.Outages {
		if w.Start < 0 || w.Duration <= 0 {
			return fmt.Errorf("%w: outage %v:%v must have start >= 0 and a positive duration", ErrInvalid, w.Start, w.Duration)
		}
	}
	if p := o.OutageEvery; p != (Periodic{}) && (p.Every <= 0 || p.Duration <= 0 || p.Duration >= p.Every) {
		return fmt.Errorf("%w: periodic outage %v:%v needs 0 < duration < interval", ErrInvalid, p.Every, p.Duration)
	}
	mtu := o.mtu()
	for _, d := range []struct {
		name string
		q    int64
	}{{"forward", o.Fwd.Queue}, {"return", o.Ret.Queue}} {
		if d.q != 0 && d.q < int64(mtu) {
			return fmt.Errorf("%w: %s queue %d bytes is smaller than one packet (mtu %d)", ErrInvalid, d.name, d.q, mtu)
		}
	}
	return nil
}

func (o *Options) mtu() int {
	if o.MTU == 0 {
		return DefaultMTU
	}
	return o.MTU
}

// queueLimit returns the drop-tail limit of d: the configured one, or one
// bandwidth-delay product (highest rate times the round trip), at least
// minQueue. With an unlimited rate nothing waits, so any limit would do.
func (o *Options) queueLimit(d *Dir) int64 {
	if d.Queue > 0 {
		return d.Queue
	}
	c := newRateCurve(d.Rate, d.RateSchedule)
	rtt := o.Fwd.Delay + o.Ret.Delay
	bdp := int64(float64(c.maxRate()) / 8 * rtt.Seconds())
	return max(bdp, minQueue)
}

// DirCounters counts one direction's packets.
type DirCounters struct {
	InPackets  uint64 // read from the sending side's TUN
	InBytes    uint64
	Packets    uint64 // delivered to the receiving side's TUN
	Bytes      uint64
	DropLoss   uint64 // random, bit-error or burst loss
	DropQueue  uint64 // drop-tail (modem buffer full)
	DropOutage uint64 // link down
	Errors     uint64 // lost by the host, not the model: device read/write errors, ring full (65536 in flight)
	Reordered  uint64 // held back by the reorder model (and delivered)
}

// Counters are the emulator's counters per direction.
type Counters struct {
	Fwd DirCounters // A -> B
	Ret DirCounters // B -> A
}

// Format writes one line per direction.
func (c Counters) Format(w io.Writer) {
	for _, d := range []struct {
		name string
		c    DirCounters
	}{{"forward (A->B)", c.Fwd}, {"return  (B->A)", c.Ret}} {
		fmt.Fprintf(w, "%s: in %d pkts %d bytes; delivered %d pkts %d bytes (%d reordered); drops: loss %d, queue %d, outage %d; errors %d\n",
			d.name, d.c.InPackets, d.c.InBytes, d.c.Packets, d.c.Bytes, d.c.Reordered, d.c.DropLoss, d.c.DropQueue, d.c.DropOutage, d.c.Errors)
	}
}
