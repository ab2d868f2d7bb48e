package scps

// This file owns Config: the knobs of one association, their defaults and
// their validation.

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"scpsvpn/scps/cc"
	"scpsvpn/scps/internal/wire"
	"scpsvpn/scps/settings"
)

// Protocol constants both ends assume before the peer has said otherwise.
// They are part of the wire contract (spec.md).
const (
	// InitialStreamCredit is the send credit of a new stream in each
	// direction before any MAX_STREAM_DATA.
	InitialStreamCredit = settings.InitialStreamCredit
	// InitialConnCredit is the association-wide send credit before any
	// MAX_DATA.
	InitialConnCredit = settings.InitialConnCredit
	// InitialMaxStreams is how many streams each side may open before the
	// peer's first MAX_STREAMS.
	InitialMaxStreams = settings.InitialMaxStreams
	// MaxAckDelay is the longest a receiver holds back an ACK for an
	// ack-eliciting packet (and what a sender adds to its probe timeout).
	MaxAckDelay = 25 * time.Millisecond
	// MaxMetaSize is the largest stream-open metadata.
	MaxMetaSize = wire.MaxMetaLen
	// MinMemory is the least memory budget (Config.Memory): the initial
	// connection credit both ways, and the initial stream credit of the
	// fewest streams a peer may always open.
	MinMemory = settings.MinMemory
)

// Config holds the parameters of one association.
type Config struct {
	// EvenStreams: this side opens even stream IDs, the peer odd.
	EvenStreams bool
	// TailParity: the peer takes PARITY frames (spec.md), so this side
	// sends them at a burst's end, and keeps the payloads of its newest
	// received packets for the peer's (parity.go). Both ends must set it
	// (the tunnel does when the peer's capabilities say so).
	TailParity bool
	// PathRoles: the peer takes PATH_ROLE frames (spec.md), so this
	// side's path probes on the paths it was told say whether each is a
	// backup: a peer that only learned its paths sends no data on its
	// backups while a primary works (paths.go). The tunnel sets it when
	// the peer's capabilities say so.
	PathRoles bool
	// MaxPacketSize is the largest association packet handed to Transmit.
	MaxPacketSize int
	// WireOverhead is the bytes added below us per packet (AEAD, UDP, IP);
	// the pacer charges packet + overhead.
	WireOverhead int
	// HeaderGrowth, if set, is how many bytes the layer below adds to
	// packet number pn beyond WireOverhead (it carries the number in a
	// field that grows with it): packet pn holds at most MaxPacketSize -
	// HeaderGrowth(pn) bytes, so every datagram fits the same path.
	HeaderGrowth func(pn uint64) int
	// InitialRTT is the RTT assumed before the first sample.
	InitialRTT time.Duration
	// MinRTO is the floor of the probe timeout.
	MinRTO time.Duration
	// SendRate is the link rate toward the peer in bit/s; 0 = unknown.
	SendRate int64
	// Resume is the path an earlier association to the same peer
	// measured (Association.PathState), for careful resume (scps/cc
	// resume.go); the zero value starts afresh.
	Resume cc.Resume
	// RecvRate is the link rate from the peer in bit/s; 0 = unknown. Our
	// ACK traffic is held to 1/20 of it.
	RecvRate int64
	// Congestion names the congestion controller: "vj", "vegas",
	// "hybla", "hybrid" or "rate" ("" = cc.DefaultName, "hybrid"). "rate"
	// needs SendRate.
	Congestion string
	// Loss says what a lost packet means to congestion control: LossAuto
	// ("" = "auto": a loss after queue growth is congestion, one without
	// is corruption), LossCongestion (every loss) or LossCorruption (no
	// loss ever shrinks the window).
	Loss string
	// StreamWindow caps one stream's receive window; 0 = auto. Windows
	// start at four times the bandwidth-delay product of RecvRate and
	// InitialRTT (at least 1 MiB, see initialStreamWindow) and double
	// while the application drains half of one per smoothed RTT (streams.Window),
	// auto: up to maxAutoWindow, so a link faster than configured, or not
	// configured at all, is found by measuring.
	StreamWindow uint64
	// ConnWindow caps the association's receive window; 0 = auto. It
	// follows the streams' windows (at least 1.5 times the largest), auto:
	// up to twice a stream's limit.
	ConnWindow uint64
	// SendBuffer caps how many bytes one stream may hold unsent or
	// unacknowledged before Write blocks; 0 = auto. A stream's buffer starts
	// at four times the bandwidth-delay product of SendRate and
	// InitialRTT, at least DefaultSendBuffer, and doubles while half of it
	// is acknowledged per smoothed RTT with the writer waiting for room,
	// auto: up to maxAutoWindow.
	SendBuffer int
	// MaxStreams is how many streams the peer may have open at once.
	// With Memory set, at most as many as fit three quarters of it at the
	// initial stream credit each.
	MaxStreams int
	// Memory is the association's memory budget in bytes: what its
	// streams may hold in send buffers (unacknowledged) and in receive
	// credit (granted and not consumed), shared fairly by the streams
	// (memory.go); 0 = no budget, only the windows' own limits.
	Memory uint64
	// IdleTimeout closes the association when nothing was received for
	// this long; 0 = never.
	IdleTimeout time.Duration
	// AckEvery is how many ack-eliciting packets may arrive before an ACK
	// must go out (0 = default 10).
	AckEvery int
	// AcksPerRTT (k) bounds the ACK delay to srtt/k (and MaxAckDelay)
	// after an ack-eliciting packet (0 = default 4).
	AcksPerRTT int
	// OutageAfter is the silence after which the association enters
	// outage mode: nothing received for this long, or nothing newly
	// acknowledged for this long while packets are outstanding. 0 =
	// DefaultOutageAfter. When idle the association sends a keep-alive
	// PING after a quarter of it without hearing the peer.
	OutageAfter time.Duration
	// ProbeInterval is the fixed interval of probes during an outage (no
	// backoff); it also caps the backoff of the probe timeout. 0 =
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// MaxOutage is how long an outage may last before the association
	// closes and resets its streams. 0 = DefaultMaxOutage.
	MaxOutage time.Duration
}

// Loss-cause modes (Config.Loss).
const (
	LossAuto       = settings.LossAuto
	LossCongestion = settings.LossCongestion
	LossCorruption = settings.LossCorruption
)

// LossModes lists the valid Config.Loss values, the default first.
func LossModes() []string { return settings.LossModes() }

// Defaults. DefaultSendBuffer is the least a stream's automatic send
// buffer starts at: unacknowledged data stays in the send buffer, so one
// stream can only keep its buffer in flight until auto-tuning has measured
// the link; 4 MiB covers 2.5 times the bandwidth-delay product of a 20
// Mbit/s GEO link at 650 ms (1.6 MB). With configured rates the sizes start
// at windowBDPs times the product. Memory is only taken as data is actually
// queued (8 KiB chunks) and returned as it is acknowledged or read.
const (
	DefaultMaxPacketSize = 1350
	DefaultWireOverhead  = 16 + 16 + 8 + 20 // AEAD tag + header, UDP, IPv4
	DefaultInitialRTT    = 100 * time.Millisecond
	DefaultMinRTO        = 200 * time.Millisecond
	DefaultSendBuffer    = 4 << 20
	DefaultMaxStreams    = 4096
	DefaultAckEvery      = 10
	DefaultAcksPerRTT    = 4
	DefaultOutageAfter   = settings.DefaultOutageAfter
	DefaultProbeInterval = settings.DefaultProbeInterval
	DefaultMaxOutage     = settings.DefaultMaxOutage
	// minInitialStreamWindow is the least receive window a new stream
	// starts with (the bandwidth-delay product of 10 Mbit/s at 800 ms, for
	// when the peer's rate is not configured). It only bounds what may be
	// sent before the reader catches up; the association window bounds
	// all streams together, and memory is taken only as data arrives.
	minInitialStreamWindow = 1 << 20
	// windowBDPs sizes the automatic windows and send buffers in
	// bandwidth-delay products: one in flight, and the data that arrives
	// behind a hole during its repair (a round trip and a half, another
	// if the repair is lost).
	windowBDPs = 4
	// unsentBDPs: the streams together hold at most this many
	// bandwidth-delay products written and not yet sent (at least a
	// new stream's send buffer): what keeps the link busy for a round
	// trip beyond the data in flight, whatever the writers could add.
	unsentBDPs = 2
	// silenceGapFactor and minSilenceHold: new data waits once the peer
	// has been quiet this many times its longest recent gap
	// (outageDetector.silence).
	silenceGapFactor = 4
	minSilenceHold   = 20 * time.Millisecond
	// maxAutoWindow caps the automatic window and buffer sizes: 1.6
	// times the bandwidth-delay product of 1 Gbit/s at 1 s, far beyond
	// what a satellite link needs (250 Mbit/s at 650 ms is 20 MB), so that
	// only what is measured limits a window, never a default.
	maxAutoWindow = 256 << 20
)

// DefaultConfig returns a Config with every default filled in; the
// window and buffer sizes stay 0 (automatic), since they follow the rates
// and RTT set afterwards and what is measured.
func DefaultConfig() Config {
	return Config{
		MaxPacketSize: DefaultMaxPacketSize,
		TailParity:    true,
		PathRoles:     true,
		WireOverhead:  DefaultWireOverhead,
		InitialRTT:    DefaultInitialRTT,
		MinRTO:        DefaultMinRTO,
		Congestion:    cc.DefaultName,
		Loss:          LossAuto,
		MaxStreams:    DefaultMaxStreams,
		AckEvery:      DefaultAckEvery,
		AcksPerRTT:    DefaultAcksPerRTT,
		OutageAfter:   DefaultOutageAfter,
		ProbeInterval: DefaultProbeInterval,
		MaxOutage:     DefaultMaxOutage,
	}
}

// bdp is rate (bit/s) times rtt in bytes.
func bdp(rate int64, rtt time.Duration) float64 { return float64(rate) / 8 * rtt.Seconds() }

// autoSize is windowBDPs times the bandwidth-delay product, between floor
// and maxAutoWindow, rounded up to a multiple of 64 KiB.
func autoSize(rate int64, rtt time.Duration, floor uint64) uint64 {
	v := uint64(windowBDPs * bdp(rate, rtt))
	v = (v + 0xffff) &^ 0xffff
	return min(max(v, floor), maxAutoWindow)
}

// withDefaults fills zero fields with their defaults, so a Config built by
// hand with only a few fields set still works.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxPacketSize == 0 {
		c.MaxPacketSize = d.MaxPacketSize
	}
	if c.InitialRTT == 0 {
		c.InitialRTT = d.InitialRTT
	}
	if c.MinRTO == 0 {
		c.MinRTO = d.MinRTO
	}
	if c.Congestion == "" {
		c.Congestion = d.Congestion
	}
	if c.Loss == "" {
		c.Loss = d.Loss
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = d.MaxStreams
	}
	if c.AckEvery == 0 {
		c.AckEvery = d.AckEvery
	}
	if c.AcksPerRTT == 0 {
		c.AcksPerRTT = d.AcksPerRTT
	}
	if c.OutageAfter == 0 {
		c.OutageAfter = d.OutageAfter
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	if c.MaxOutage == 0 {
		c.MaxOutage = max(d.MaxOutage, c.OutageAfter)
	}
	return c
}

// streamWindowLimit is how far a stream's receive window may grow.
func (c Config) streamWindowLimit() uint64 {
	if c.StreamWindow > 0 {
		return c.StreamWindow
	}
	return maxAutoWindow
}

// connWindowLimit is how far the association's receive window may grow.
func (c Config) connWindowLimit() uint64 {
	if c.ConnWindow > 0 {
		return c.ConnWindow
	}
	return max(2*c.streamWindowLimit(), InitialConnCredit)
}

// initialStreamWindow is the credit a new stream gets at once:
// windowBDPs times the bandwidth-delay product of the configured receive
// rate, at least minInitialStreamWindow, so the sender's slow start, not
// flow control, finds the link. Auto-tuning up from less held a 10 Mbit/s
// GEO download below a twentieth of the link for its first two seconds
// with no rate configured, and a C2 download (3% loss) to 88% of the
// link for five seconds with twice the BDP: data waiting behind a hole
// counts against the window.
func (c Config) initialStreamWindow() uint64 {
	w := max(uint64(windowBDPs*bdp(c.RecvRate, c.InitialRTT)), minInitialStreamWindow)
	return min(max(w, InitialStreamCredit), c.streamWindowLimit())
}

// initialConnWindow is the association credit granted at once, at most
// half the memory budget.
func (c Config) initialConnWindow() uint64 {
	w := min(max(2*c.initialStreamWindow(), InitialConnCredit), c.connWindowLimit())
	if c.Memory > 0 {
		w = max(min(w, c.Memory/2), InitialConnCredit)
	}
	return w
}

// streamLimit is how many streams the peer may have open at once: with a
// memory budget, no more than fit three quarters of it at the protocol's
// initial stream credit, which every stream has (memory.go).
func (c Config) streamLimit() int {
	if c.Memory == 0 {
		return c.MaxStreams
	}
	return min(c.MaxStreams, max(InitialMaxStreams, int(c.streamMemory()*3/4/InitialStreamCredit)))
}

// sendBufferLimit is how far a stream's send buffer may grow.
func (c Config) sendBufferLimit() uint64 {
	if c.SendBuffer > 0 {
		return uint64(c.SendBuffer)
	}
	return maxAutoWindow
}

// initialSendBuffer is a new stream's send buffer: windowBDPs times the
// bandwidth-delay product of the configured send rate, at least
// DefaultSendBuffer.
func (c Config) initialSendBuffer() uint64 {
	if c.SendBuffer > 0 {
		return uint64(c.SendBuffer)
	}
	return autoSize(c.SendRate, c.InitialRTT, DefaultSendBuffer)
}

// keepAliveInterval is how long the association waits without hearing the
// peer before it sends a keep-alive PING while idle: a quarter of the
// silence that would make the peer declare an outage (or close for
// IdleTimeout), so a lost PING and two rounds of probes still fit.
func (c Config) keepAliveInterval() time.Duration {
	d := c.OutageAfter / 4
	if c.IdleTimeout > 0 {
		d = min(d, c.IdleTimeout/3)
	}
	return d
}

// ErrConfig is wrapped by every Validate error.
var ErrConfig = errors.New("scps: invalid config")

// Validate checks every field and names the first bad one and what is
// allowed. Zero fields take their defaults and are valid.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field string, v any, allowed string) error {
		return fmt.Errorf("%w: %s = %v: %s", ErrConfig, field, v, allowed)
	}
	switch {
	case c.MaxPacketSize < 1200 || c.MaxPacketSize > 65000:
		return bad("MaxPacketSize", c.MaxPacketSize, "must be between 1200 and 65000 bytes")
	case c.WireOverhead < 0 || c.WireOverhead > 1000:
		return bad("WireOverhead", c.WireOverhead, "must be between 0 and 1000 bytes")
	case c.InitialRTT < settings.MinRTT || c.InitialRTT > settings.MaxRTT:
		return bad("InitialRTT", c.InitialRTT, fmt.Sprintf("must be between %v and %v", settings.MinRTT, settings.MaxRTT))
	case c.MinRTO < time.Millisecond || c.MinRTO > time.Minute:
		return bad("MinRTO", c.MinRTO, "must be between 1ms and 1m")
	case c.SendRate < 0 || (c.SendRate > 0 && c.SendRate < settings.MinRate):
		return bad("SendRate", c.SendRate, fmt.Sprintf("must be 0 (unknown) or at least %d bit/s", settings.MinRate))
	case c.RecvRate < 0 || (c.RecvRate > 0 && c.RecvRate < settings.MinRate):
		return bad("RecvRate", c.RecvRate, fmt.Sprintf("must be 0 (unknown) or at least %d bit/s", settings.MinRate))
	case !cc.Known(c.Congestion):
		return bad("Congestion", fmt.Sprintf("%q", c.Congestion), fmt.Sprintf("must be one of %v", cc.Names()))
	case c.Congestion == settings.CongestionRate && c.SendRate == 0:
		return bad("Congestion", `"rate"`, "sends open loop at the link rate, so SendRate must be set")
	case !slices.Contains(LossModes(), c.Loss):
		return bad("Loss", fmt.Sprintf("%q", c.Loss), fmt.Sprintf("must be one of %v", LossModes()))
	case c.StreamWindow != 0 && (c.StreamWindow < settings.MinStreamWindow || c.StreamWindow > settings.MaxStreamWindow):
		return bad("StreamWindow", c.StreamWindow, fmt.Sprintf("must be 0 (auto) or between %d and %d bytes", settings.MinStreamWindow, settings.MaxStreamWindow))
	case c.ConnWindow != 0 && (c.ConnWindow < max(InitialConnCredit, c.StreamWindow) || c.ConnWindow > 1<<32):
		return bad("ConnWindow", c.ConnWindow, fmt.Sprintf("must be 0 (auto) or at least %d bytes and at least StreamWindow (%d), at most 4 GiB", InitialConnCredit, c.StreamWindow))
	case c.SendBuffer != 0 && (c.SendBuffer < 64<<10 || c.SendBuffer > 1<<30):
		return bad("SendBuffer", c.SendBuffer, "must be 0 (auto) or between 64 KiB and 1 GiB")
	case c.Memory != 0 && (c.Memory < MinMemory || c.Memory > settings.MaxMemory):
		return bad("Memory", c.Memory, fmt.Sprintf("must be 0 (no budget) or between %d bytes and 1 TiB", MinMemory))
	case c.MaxStreams < InitialMaxStreams || c.MaxStreams > settings.MaxStreams:
		return bad("MaxStreams", c.MaxStreams, fmt.Sprintf("must be between %d and %d", InitialMaxStreams, settings.MaxStreams))
	case c.IdleTimeout < 0:
		return bad("IdleTimeout", c.IdleTimeout, "must be >= 0 (0 = none)")
	case c.IdleTimeout > 0 && c.IdleTimeout < 2*c.MinRTO:
		return bad("IdleTimeout", c.IdleTimeout, fmt.Sprintf("must be 0 or at least 2*MinRTO (%v)", 2*c.MinRTO))
	case c.AckEvery < 1 || c.AckEvery > 64:
		return bad("AckEvery", c.AckEvery, "must be between 1 and 64 packets")
	case c.AcksPerRTT < 1 || c.AcksPerRTT > 64:
		return bad("AcksPerRTT", c.AcksPerRTT, "must be between 1 and 64")
	case c.OutageAfter < settings.MinOutageAfter || c.OutageAfter > settings.MaxOutageAfter:
		return bad("OutageAfter", c.OutageAfter, fmt.Sprintf("must be between %v and %v", settings.MinOutageAfter, settings.MaxOutageAfter))
	case c.ProbeInterval < settings.MinProbeInterval || c.ProbeInterval > settings.MaxProbeInterval:
		return bad("ProbeInterval", c.ProbeInterval, fmt.Sprintf("must be between %v and %v", settings.MinProbeInterval, settings.MaxProbeInterval))
	case c.MaxOutage < settings.MinMaxOutage || c.MaxOutage > settings.MaxMaxOutage:
		return bad("MaxOutage", c.MaxOutage, fmt.Sprintf("must be between %v and %v", settings.MinMaxOutage, settings.MaxMaxOutage))
	case c.MaxOutage < c.OutageAfter:
		return bad("MaxOutage", c.MaxOutage, fmt.Sprintf("must be at least OutageAfter (%v)", c.OutageAfter))
	}
	return nil
}
