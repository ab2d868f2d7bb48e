// Package scps is the SCPS-TP association of scpsvpn: many reliable,
// ordered byte streams and unreliable datagrams multiplexed over one
// packet exchange with a peer, with selective acknowledgement of every hole,
// thinned ACKs, loss detection by packet and time thresholds, credit-based
// flow control, pluggable congestion control and pacing at the link rate.
//
// The core, Association, does no I/O and keeps no goroutines: packets and
// the time go in, packets and the next deadline come out, so it runs
// deterministically under a simulated clock. Session wraps one Association
// with a goroutine, a timer and blocking Streams for the tunnel. spec.md
// beside this file gives the wire format byte by byte.
package scps

// This file owns Config: the knobs of one association, their defaults and
// their validation.

import (
	"errors"
	"fmt"
	"time"

	"scpsvpn/scps/cc"
)

// Protocol constants both ends assume before the peer has said otherwise.
// They are part of the wire contract (spec.md).
const (
	// InitialStreamCredit is the send credit of a new stream in each
	// direction before any MAX_STREAM_DATA.
	InitialStreamCredit = 64 << 10
	// InitialConnCredit is the association-wide send credit before any
	// MAX_DATA.
	InitialConnCredit = 1 << 20
	// InitialMaxStreams is how many streams each side may open before the
	// peer's first MAX_STREAMS.
	InitialMaxStreams = 128
	// MaxAckDelay is the longest a receiver holds back an ACK for an
	// ack-eliciting packet (and what a sender adds to its probe timeout).
	MaxAckDelay = 25 * time.Millisecond
	// MaxMetaSize is the largest stream-open metadata.
	MaxMetaSize = 512
)

// Config holds the parameters of one association.
type Config struct {
	// EvenStreams: this side opens even stream IDs, the peer odd.
	EvenStreams bool
	// MaxPacketSize is the largest association packet handed to Transmit.
	MaxPacketSize int
	// WireOverhead is the bytes added below us per packet (AEAD, UDP, IP);
	// the pacer charges packet + overhead.
	WireOverhead int
	// InitialRTT is the RTT assumed before the first sample.
	InitialRTT time.Duration
	// MinRTO is the floor of the probe timeout.
	MinRTO time.Duration
	// SendRate is the link rate toward the peer in bit/s; 0 = unknown.
	SendRate int64
	// RecvRate is the link rate from the peer in bit/s; 0 = unknown. Our
	// ACK traffic is held to 1/20 of it.
	RecvRate int64
	// Congestion names the congestion controller ("" = "vj").
	Congestion string
	// StreamWindow is the largest receive window of one stream; windows
	// start at InitialStreamCredit and grow toward it while the
	// application keeps up.
	StreamWindow uint64
	// ConnWindow is the largest receive window of the association.
	ConnWindow uint64
	// SendBuffer is how many bytes one stream may hold unsent or
	// unacknowledged before Write blocks.
	SendBuffer int
	// MaxStreams is how many streams the peer may have open at once.
	MaxStreams int
	// IdleTimeout closes the association when nothing was received for
	// this long; 0 = never.
	IdleTimeout time.Duration
	// AckEvery is how many ack-eliciting packets may arrive before an ACK
	// must go out (0 = default 10).
	AckEvery int
}

// Defaults. SendBuffer is 4 MiB: unacknowledged data stays in the send
// buffer, so one stream can only keep SendBuffer in flight; 4 MiB covers
// 2.5 times the bandwidth-delay product of a 20 Mbit/s GEO link at 650 ms
// (1.6 MB) and 30 ms at 1 Gbit/s, while memory is only taken as data is
// actually queued (8 KiB chunks) and returned as it is acknowledged.
const (
	DefaultMaxPacketSize = 1350
	DefaultWireOverhead  = 16 + 16 + 8 + 20 // AEAD tag + header, UDP, IPv4
	DefaultInitialRTT    = 100 * time.Millisecond
	DefaultMinRTO        = 200 * time.Millisecond
	DefaultStreamWindow  = 4 << 20
	DefaultConnWindow    = 32 << 20
	DefaultSendBuffer    = 4 << 20
	DefaultMaxStreams    = 4096
	DefaultAckEvery      = 10
)

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		MaxPacketSize: DefaultMaxPacketSize,
		WireOverhead:  DefaultWireOverhead,
		InitialRTT:    DefaultInitialRTT,
		MinRTO:        DefaultMinRTO,
		Congestion:    cc.DefaultName,
		StreamWindow:  DefaultStreamWindow,
		ConnWindow:    DefaultConnWindow,
		SendBuffer:    DefaultSendBuffer,
		MaxStreams:    DefaultMaxStreams,
		AckEvery:      DefaultAckEvery,
	}
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
	if c.StreamWindow == 0 {
		c.StreamWindow = d.StreamWindow
	}
	if c.ConnWindow == 0 {
		c.ConnWindow = max(d.ConnWindow, c.StreamWindow)
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = d.SendBuffer
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = d.MaxStreams
	}
	if c.AckEvery == 0 {
		c.AckEvery = d.AckEvery
	}
	return c
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
	case c.InitialRTT < time.Millisecond || c.InitialRTT > time.Minute:
		return bad("InitialRTT", c.InitialRTT, "must be between 1ms and 1m")
	case c.MinRTO < time.Millisecond || c.MinRTO > time.Minute:
		return bad("MinRTO", c.MinRTO, "must be between 1ms and 1m")
	case c.SendRate < 0 || (c.SendRate > 0 && c.SendRate < 8000):
		return bad("SendRate", c.SendRate, "must be 0 (unknown) or at least 8000 bit/s")
	case c.RecvRate < 0 || (c.RecvRate > 0 && c.RecvRate < 8000):
		return bad("RecvRate", c.RecvRate, "must be 0 (unknown) or at least 8000 bit/s")
	case !cc.Known(c.Congestion):
		return bad("Congestion", fmt.Sprintf("%q", c.Congestion), fmt.Sprintf("must be one of %v", cc.Names()))
	case c.StreamWindow < InitialStreamCredit || c.StreamWindow > 1<<30:
		return bad("StreamWindow", c.StreamWindow, fmt.Sprintf("must be between %d and %d bytes", InitialStreamCredit, 1<<30))
	case c.ConnWindow < max(InitialConnCredit, c.StreamWindow) || c.ConnWindow > 1<<32:
		return bad("ConnWindow", c.ConnWindow, fmt.Sprintf("must be at least %d bytes and at least StreamWindow (%d), at most 4 GiB", InitialConnCredit, c.StreamWindow))
	case c.SendBuffer < 64<<10 || c.SendBuffer > 1<<30:
		return bad("SendBuffer", c.SendBuffer, "must be between 64 KiB and 1 GiB")
	case c.MaxStreams < InitialMaxStreams || c.MaxStreams > 1<<20:
		return bad("MaxStreams", c.MaxStreams, fmt.Sprintf("must be between %d and %d", InitialMaxStreams, 1<<20))
	case c.IdleTimeout < 0:
		return bad("IdleTimeout", c.IdleTimeout, "must be >= 0 (0 = none)")
	case c.IdleTimeout > 0 && c.IdleTimeout < 2*c.MinRTO:
		return bad("IdleTimeout", c.IdleTimeout, fmt.Sprintf("must be 0 or at least 2*MinRTO (%v)", 2*c.MinRTO))
	case c.AckEvery < 1 || c.AckEvery > 64:
		return bad("AckEvery", c.AckEvery, "must be between 1 and 64 packets")
	}
	return nil
}
