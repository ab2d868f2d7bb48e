package scps

// This file owns Stats, the counters and gauges of one association.

import (
	"time"

	"scpsvpn/scps/cc"
	"scpsvpn/scps/internal/ackhandler"
)

// Stats is a snapshot of an association's counters and state.
type Stats struct {
	PacketsSent        uint64 // association packets sent
	PacketsReceived    uint64 // association packets accepted
	BytesSent          uint64 // association packet bytes sent (without WireOverhead)
	BytesReceived      uint64 // association packet bytes accepted
	AckOnlyPacketsSent uint64 // packets that carried only an ACK (and maybe padding)
	PacketsLost        uint64 // in-flight packets declared lost
	BytesLost          uint64
	Retransmits        uint64 // stream frames sent again after loss or probe
	RetransmitBytes    uint64 // stream bytes sent again
	TailCopies         uint64 // packets that sent a burst's last packets' data again before any loss was known
	TailCopyBytes      uint64 // stream bytes they carried
	ParityPackets      uint64 // packets of PARITY frames sent at a burst's end (parity.go)
	ParityBytes        uint64 // parity bytes they carried
	ParityRepairs      uint64 // packets rebuilt from the peer's parities
	ParityUnused       uint64 // the peer's parity blocks that could rebuild nothing (two lost, or not kept)
	BadParity          uint64 // the peer's parity blocks that rebuilt a malformed packet (dropped)
	PTOs               uint64 // probe timeouts fired
	CongestionEvents   uint64 // loss batches reported to congestion control
	DuplicatePackets   uint64 // packets received again (dropped)
	BadPackets         uint64 // malformed packets rejected
	ProtocolErrors     uint64 // peer protocol violations (association closed)
	RecvRangeDrops     uint64 // packets dropped unacknowledged: their frames would leave too many received ranges
	RangeAbuseCloses   uint64 // closes because the peer kept sending such packets (also a protocol error)

	// TrainPacketsSent and TrainBytesSent count the path train's packets
	// (Association.ProbePath): padding that timed the path.
	TrainPacketsSent, TrainBytesSent uint64

	StreamBytesSent     uint64 // new stream bytes sent (first transmissions)
	StreamBytesReceived uint64 // stream bytes delivered to the application
	StreamsOpened       uint64 // by us
	StreamsAccepted     uint64 // opened by the peer
	StreamsOpen         int    // currently in the stream table
	BufferedBytes       int    // memory held by the streams' send and receive buffers

	DatagramsSent     uint64
	DatagramsReceived uint64
	DatagramsDropped  uint64 // dropped before sending (queue full or too old)

	AcksDeferred uint64 // ACKs held back by the ACK rate budget

	// Loss batches by the cause they were attributed to.
	LossEventsCongestion uint64
	LossEventsCorruption uint64
	LossEventsOutage     uint64

	Outage       bool          // in outage mode now
	Outages      uint64        // times outage mode was entered
	OutageTime   time.Duration // time spent in outage mode, including the current one
	OutageProbes uint64        // probes sent in outage mode
	SilenceHolds uint64        // times new data was held because the peer went quiet mid-flight
	KeepAlives   uint64        // keep-alive PINGs sent while idle

	// LateWakes counts the session goroutine's timer wake-ups that came
	// more than the pacer's burst after their planned time, and
	// LateWakeTime sums what they were late beyond it: time a host did
	// not run the endpoint (a busy CPU). The pacer makes up to an RTT/16
	// and 10 ms of each such wake-up when it was the pacer's turn
	// (bucket.due); the rest is send time lost. Session only; the
	// Association's own Stats leave them zero.
	LateWakes    uint64
	LateWakeTime time.Duration

	Congestion string // controller name
	Loss       string // loss-cause mode
	// Resume is the controller's careful resume phase (cc.ResumePhase:
	// "off" when it started without saved state or refused it, else
	// the phase the saved path took it to); empty for a controller
	// without careful resume.
	Resume        string
	ResumeRetreat string // the signal a retreat came on (cc.Retreat*), "" when none
	InSlowStart   bool
	Cwnd          int // congestion window, bytes
	BytesInFlight int
	PacingRate    float64 // bytes/s the pacer releases at (0 = unlimited)
	SRTT          time.Duration
	RTTVar        time.Duration
	MinRTT        time.Duration
	LatestRTT     time.Duration
	QueueDelay    time.Duration // latest RTT sample (less ACK delay) above the minimum
	DeliveryRate  float64       // bytes/s acknowledged over the last round trip
}

// addSent copies the sent-packet handler's counters and its congestion
// and RTT state into s.
func (s *Stats) addSent(h *ackhandler.SentPacketHandler) {
	c := h.Stats()
	s.PacketsLost, s.BytesLost = c.PacketsLost, c.BytesLost
	s.PTOs, s.CongestionEvents = c.PTOs, c.CongestionEvents
	s.LossEventsCongestion = c.LossEventsCongestion
	s.LossEventsCorruption = c.LossEventsCorruption
	s.LossEventsOutage = c.LossEventsOutage
	ctl, rtt := h.Controller(), h.RTT()
	s.InSlowStart = ctl.InSlowStart()
	if r, ok := ctl.(cc.Resumer); ok {
		s.Resume, s.ResumeRetreat = r.ResumePhase().String(), r.RetreatCause()
	}
	s.Cwnd = ctl.Window()
	s.BytesInFlight = h.BytesInFlight()
	s.PacingRate = h.PacingRate()
	s.SRTT = rtt.Smoothed()
	s.RTTVar = rtt.Var()
	s.MinRTT = rtt.Min()
	s.LatestRTT = rtt.Latest()
	s.QueueDelay = h.QueueDelay()
	s.DeliveryRate = h.DeliveryRate()
}
