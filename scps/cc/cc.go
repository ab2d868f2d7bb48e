// Package cc owns congestion control for the SCPS association: one small
// Controller interface, the events that drive it, a shared RTT estimator and
// a registry of controllers by name: "vj" (NewReno), "vegas", "hybla",
// "hybrid" (Hybla's slow start with Vegas' congestion avoidance, the
// paper's proposal (README) and the default) and "rate" (open loop at the configured
// link rate). Loss events carry a Cause so a controller leaves its window
// alone for corruption or outage losses; the association decides the cause.
package cc

import (
	"fmt"
	"sort"
	"time"

	"scpsvpn/scps/settings"
)

// Cause says why packets were lost, as far as the association can tell.
type Cause uint8

const (
	// CauseCongestion: the default; the controller reduces its window.
	CauseCongestion Cause = iota
	// CauseCorruption: loss on the link without queue growth; the window
	// stays.
	CauseCorruption
	// CauseOutage: the link was down; the window stays.
	CauseOutage
)

func (c Cause) String() string {
	switch c {
	case CauseCongestion:
		return "congestion"
	case CauseCorruption:
		return "corruption"
	case CauseOutage:
		return "outage"
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// AckEvent reports packets newly acknowledged by one ACK frame.
type AckEvent struct {
	AckedBytes    int       // bytes of in-flight packets newly acknowledged
	PriorInFlight int       // bytes in flight before these were removed
	LargestSentAt time.Time // send time of the largest newly acknowledged packet
	RTTUpdated    bool      // this ACK produced an RTT sample
	// RTT is that sample less the peer's reported ACK delay (never below
	// the minimum RTT); 0 when RTTUpdated is false. Delay-based
	// controllers read queueing from it.
	RTT time.Duration
	// AckDelay is how long the peer says it held this ACK after the
	// largest packet arrived (when RTTUpdated: that packet was sent at
	// LargestSentAt): now - AckDelay is when it arrived, up to the return
	// path's delay.
	AckDelay time.Duration
	// Packet numbers the received packet this ACK frame came in (from 1;
	// 0: not known). Frames of one packet (a late ACK's points, ahead of
	// its ACK) left the peer together, so the spread of the arrivals they
	// report is free of the return path's delays, which differ from one
	// ACK packet to the next (capacity).
	Packet uint64
}

// LossEvent reports packets declared lost together.
type LossEvent struct {
	LostBytes     int
	PriorInFlight int
	LargestSentAt time.Time // send time of the largest lost packet
	Cause         Cause
	// Persistent is set when the lost packets span more than a persistent
	// congestion period (RFC 9002 7.6): the path may have changed.
	Persistent bool
}

// Controller is a congestion controller. The association calls it from one
// goroutine; implementations need no locking.
type Controller interface {
	// Name is the registry name.
	Name() string
	// OnPacketSent is called for every packet that counts toward bytes in
	// flight; inFlight includes it.
	OnPacketSent(now time.Time, bytes, inFlight int)
	// OnAck is called once per ACK frame that acknowledged in-flight packets.
	OnAck(now time.Time, ev AckEvent)
	// OnCongestionEvent is called once per batch of packets declared lost.
	OnCongestionEvent(now time.Time, ev LossEvent)
	// Window is the congestion window in bytes.
	Window() int
	// PacingRate is the rate the controller wants to send at in bytes per
	// second; 0 means no opinion (the association paces at the link rate
	// alone).
	PacingRate() float64
	// InSlowStart reports whether the controller is in slow start.
	InSlowStart() bool
}

// LinkRater is a controller that estimates its link's rate apart from
// the rate it paces at, which runs above the link's while the sender
// does not fill it (hybrid: 1.25 times its window, kept while
// application-limited, over the round trip). Bonding shares the data of
// a sender slower than its paths by these rates (scps/bond.go).
type LinkRater interface {
	// LinkRate is the best estimate of the link's rate, bytes/s; 0:
	// none.
	LinkRate() float64
}

// FlightTimer is a controller that times the bottleneck from the ACKs of
// its first flight (hybrid, told no rate): the first full-size packet of
// that flight asks the peer for an ACK at once. With the ACK of the
// flight's last packet that is a train across the flight, where a short
// path's whole first flight (ten packets in 1.2 ms at 100 Mbit/s) came
// back as one ACK, which times nothing.
type FlightTimer interface {
	// TimingMark reports whether the next full-size packet opens the
	// timed first flight.
	TimingMark(now time.Time) bool
	// FirstFlight is how many bytes the timed first flight carries.
	FirstFlight() int
}

// PathTrainer is a FlightTimer whose timed first flight may go as a path
// train: padding sent when the association comes up, before any data
// (scps Association.ProbePath).
type PathTrainer interface {
	// OnTrainSent says the first flight went as a train of bytes
	// without data: data that comes before its ACKs must not wait
	// behind it for the window.
	OnTrainSent(now time.Time, bytes int)
}

// LowDelayer is a controller that can keep the least queue on its path
// while on (the lowest-delay path of several that bond a transfer: the
// path light streams' data goes on, which waits behind whatever queue the
// bulk keeps there).
type LowDelayer interface {
	SetLowDelay(on bool)
}

// Params is what a controller may know about its association.
type Params struct {
	MaxDatagramSize int       // largest packet the association sends (bytes)
	RTT             *RTTStats // shared estimator
	SendRate        int64     // configured link rate toward the peer, bit/s; 0 = unknown
	// RTTNoise is how much the RTT varies with no queue of ours: a narrow
	// return link serializes each ACK for milliseconds (11 ms at 64
	// kbit/s), so two ACKs back to back add that much. Delay-based
	// controllers ignore queueing delay up to it (hybrid: at least its
	// HostNoise, which it also counts as part of the pipe).
	RTTNoise time.Duration
	// Resume, if set, is the path an earlier association to the same
	// peer measured: a controller that supports careful resume
	// (resume.go) starts from it; others ignore it.
	Resume *Resume
	// WireOverhead is what the pacer charges per packet beyond its bytes
	// (the layers below: AEAD, UDP, IP). Rates measured from ACKs count
	// packet bytes only; a rate to pace at counts both.
	WireOverhead int
}

// HostNoise is the least RTT noise the delay-based parts assume: the
// endpoints' own processing (TUN, the user-space stack, socket queues,
// scheduler time slices of a loaded host) delays packets by milliseconds,
// more as the load grows; measured through the tunnel on a veth (base RTT
// 27-86 us), 0.8-6 ms. With 1 ms hybrid read it as a queue of hundreds of
// packets and held the window far below what a LAN carries. On a
// satellite path 5 ms is a few packets, below what matters there.
const HostNoise = 5 * time.Millisecond

// Factory builds a controller.
type Factory func(p Params) Controller

var registry = map[string]Factory{}

// DefaultName is the controller used when none is configured
// (settings.DefaultCongestion).
const DefaultName = settings.DefaultCongestion

// Register adds a controller under name; it is meant for init functions.
func Register(name string, f Factory) { registry[name] = f }

// Names lists the registered controllers.
func Names() []string {
	n := make([]string, 0, len(registry))
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Known reports whether name is a registered controller ("" means the
// default).
func Known(name string) bool {
	if name == "" {
		return true
	}
	_, ok := registry[name]
	return ok
}

// New builds the named controller ("" = DefaultName).
func New(name string, p Params) (Controller, error) {
	if name == "" {
		name = DefaultName
	}
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("congestion controller %q unknown (have %v)", name, Names())
	}
	if p.MaxDatagramSize <= 0 {
		return nil, fmt.Errorf("congestion controller %q: MaxDatagramSize %d must be > 0", name, p.MaxDatagramSize)
	}
	if p.RTT == nil {
		return nil, fmt.Errorf("congestion controller %q: no RTT estimator", name)
	}
	if p.SendRate < 0 {
		return nil, fmt.Errorf("congestion controller %q: SendRate %d must be >= 0", name, p.SendRate)
	}
	if name == settings.CongestionRate && p.SendRate == 0 {
		return nil, fmt.Errorf("congestion controller %q sends open loop at the link rate: SendRate must be set", name)
	}
	return f(p), nil
}
