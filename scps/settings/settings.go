// Package settings holds the transport's settings that the config file
// exposes: the default and the bounds of each, and the names a congestion
// controller or a loss mode may take. Both the association (scps.Config)
// and the config file (configs) take them from here, so each is written
// once; it imports only the standard library, so configs reads them
// without depending on the transport.
//
// The controller names are listed here, not read from scps/cc's registry:
// a controller is registered in scps/cc and named here, and a test in
// scps/cc checks that the two lists agree.
package settings

import "time"

// Congestion controllers (scps.Config.Congestion, [peer.link] congestion).
const (
	// DefaultCongestion measured best across the simulated conditions
	// (docs/transport.md).
	DefaultCongestion = "hybrid"
	// CongestionRate sends open loop at the configured link rate, so it
	// needs that rate.
	CongestionRate = "rate"
)

// Congestions lists the controllers by name, the default first.
func Congestions() []string {
	return []string{DefaultCongestion, "hybla", CongestionRate, "vegas", "vj"}
}

// Loss-cause modes (scps.Config.Loss, [peer.link] loss).
const (
	// LossAuto: a loss after queue growth is congestion, one without is
	// corruption.
	LossAuto = "auto"
	// LossCorruption: no loss ever shrinks the window.
	LossCorruption = "corruption"
	// LossCongestion: every loss does.
	LossCongestion = "congestion"
)

// LossModes lists the loss modes, the default first.
func LossModes() []string { return []string{LossAuto, LossCorruption, LossCongestion} }

// MinRate is the slowest link the transport paces, in bit/s (link rates
// up and down); 0 means unknown.
const MinRate = 8000

// RTT bounds the initial round-trip time (scps.Config.InitialRTT,
// [peer.link] rtt).
const (
	MinRTT = time.Millisecond
	MaxRTT = time.Minute
)

// InitialStreamCredit is the send credit of a new stream in each direction
// before any MAX_STREAM_DATA: part of the wire contract (scps/spec.md).
const InitialStreamCredit = 64 << 10

// InitialConnCredit is the association-wide send credit before any
// MAX_DATA, and InitialMaxStreams how many streams each side may open
// before the peer's first MAX_STREAMS: part of the wire contract.
const (
	InitialConnCredit = 1 << 20
	InitialMaxStreams = 128
)

// MinMemory is the least memory budget of one association
// (scps.Config.Memory): the initial connection credit both ways, and the
// initial stream credit of the fewest streams a peer may always open. An
// endpoint's budget ([interface] memory) must give each peer this much.
const MinMemory = 2*InitialConnCredit + InitialMaxStreams*InitialStreamCredit

// Bounds of a stream's receive window (scps.Config.StreamWindow,
// [peer.link] window): at least the credit every stream starts with.
const (
	MinStreamWindow = InitialStreamCredit
	MaxStreamWindow = 1 << 30
)

// MaxMemory bounds a memory budget: the endpoint's ([interface] memory)
// and so an association's (scps.Config.Memory).
const MaxMemory = 1 << 40

// MaxStreams bounds how many streams a peer may have open at once
// (scps.Config.MaxStreams), and so the flows an endpoint carries
// ([interface] max_flows).
const MaxStreams = 1 << 20

// Outage handling (scps.Config.OutageAfter, ProbeInterval, MaxOutage and
// the [peer.link] keys of the same names): defaults and bounds.
const (
	// DefaultOutageAfter is a few round trips even on GEO (600 ms), so a
	// lost keep-alive and its probe fit inside it.
	DefaultOutageAfter = 3 * time.Second
	MinOutageAfter     = 100 * time.Millisecond
	MaxOutageAfter     = time.Hour

	DefaultProbeInterval = time.Second
	MinProbeInterval     = 10 * time.Millisecond
	MaxProbeInterval     = time.Minute

	// MaxOutage is at least OutageAfter: an outage is declared only
	// after that.
	DefaultMaxOutage = 10 * time.Minute
	MinMaxOutage     = time.Second
	MaxMaxOutage     = 7 * 24 * time.Hour
)
