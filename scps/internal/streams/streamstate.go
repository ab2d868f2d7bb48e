package streams

// This file owns State, the per-stream state of the sans-IO core: the
// send half (buffered bytes, what was sent, acknowledged and must be
// repaired, FIN and open metadata, peer credit) and the receive half
// (reassembly, what the application consumed, credit we granted and its
// auto-tuning), each with its window (window.go).

import (
	"time"

	"scpsvpn/scps/internal/bufq"
	"scpsvpn/scps/internal/ranges"
)

// LightThreshold: a stream with at most this much unsent new data, whose
// writer is not waiting for room, is scheduled in the light queue, ahead
// of bulk streams, so a request made during a big download waits for no
// queue. A writer that waits has more to send than its buffer holds: bulk,
// however small the buffer (a memory budget shared by thousands of
// uploads leaves each a few KiB, MemBudget).
const LightThreshold = 16 << 10

// State is one stream's state in the association's core.
type State struct {
	ID    uint64
	local bool // opened by us
	meta  []byte
	Gone  bool // removed from the table; queue entries are stale

	// Send half.
	SendBuf     bufq.Buffer
	WriteOff    uint64     // end of data written by the application
	sentOff     uint64     // next new byte to send
	AckedPrefix uint64     // every byte below is acknowledged
	acked       ranges.Set // acknowledged ranges above ackedPrefix
	retx        ranges.Set // lost ranges waiting for repair
	PeerMax     uint64     // send credit granted by the peer
	peerMaxPN   uint64     // 1 + the packet number of the MAX_STREAM_DATA that set PeerMax; 0: none yet
	finQueued   bool       // CloseWrite called; finOffset valid
	finOffset   uint64
	finSent     bool // FIN went out at least once
	finLost     bool // the frame carrying FIN was lost; send it again
	finAcked    bool
	openPending bool // a local stream whose offset-0 frame must (again) go out empty
	openAcked   bool // a frame at offset 0 was acknowledged: metadata delivered
	writeWait   bool // the application waits for send-buffer space
	CreditWait  bool // has new data but no stream credit

	SendWin     Window // send buffer size, auto-tuned on the acknowledged offset
	sendLimited bool   // the buffer was full for the application this epoch
	budgetWait  bool   // the writer waits for the memory budget (MemBudget)
	sendFreed   bool   // aborted: the send buffer's bytes left the budget

	resetQueued bool // our RESET_STREAM must (again) go out
	ResetSent   bool // our RESET_STREAM went out (or is queued): the stream is aborted
	resetAcked  bool
	resetCode   uint64
	LocalErr    error // why the application may no longer use the stream, if it was us

	// Receive half.
	RecvBuf     bufq.Buffer
	Recvd       ranges.Set // received ranges at or above readOff
	ReadOff     uint64     // next byte the application reads
	HighestRecv uint64     // highest offset received (counts toward connection credit)
	SettledOff  uint64     // below it, connection credit was returned (connflow.go)
	finKnown    bool
	finalSize   uint64
	RecvMax     uint64 // credit we grant now; a stalled reader's is cut (readerstall.go)
	recvBound   uint64 // the most credit we ever granted: the peer may have sent up to it
	RecvWin     Window // receive window, auto-tuned on the read offset
	credited    uint64 // RecvMax-ReadOff counted in MemBudget.RecvGranted

	maxDataQueued bool          // a MAX_STREAM_DATA for this stream is queued
	metaKnown     bool          // peer stream: its metadata arrived (accept event sent)
	readWait      bool          // the application waits for data
	waiting       bool          // in-order data waited unread ever since waitSince (readerstall.go)
	waitSince     time.Duration // when it began to wait
	waitOff       uint64        // the read offset then
	cut           bool          // its window was cut: it grows by doubling only
	eofRead       bool          // the application was told io.EOF
	readClosed    bool          // the application closed: discard what still comes
	PeerReset     bool          // the peer's RESET_STREAM arrived
	PeerCode      uint64

	EventQueued bool // an EventStream is pending for the application
	queued      uint8
}

// Queue membership bits (State.queued): which of Map's queues hold the
// stream.
const (
	inRetxQ uint8 = 1 << iota
	inNewQ
	inCtrlQ
)

func (s *State) Contiguous() uint64 {
	if s.Recvd.Empty() {
		return s.ReadOff
	}
	f := s.Recvd.First()
	if f.Start > s.ReadOff {
		return s.ReadOff
	}
	return f.End
}

// Readable: data or EOF is available to the application.
func (s *State) Readable() bool {
	return s.Contiguous() > s.ReadOff || (s.finKnown && s.ReadOff == s.finalSize)
}

// Unsent is how much written data has not gone out yet.
func (s *State) Unsent() uint64 { return s.WriteOff - s.sentOff }

// SendCredit is how much new data the peer's stream credit still lets
// out, for traces of a stream held back by flow control.
func (s *State) SendCredit() uint64 { return s.PeerMax - s.sentOff }

// SendSpace is how many more bytes the send buffer accepts.
func (s *State) SendSpace() int {
	return int(s.SendWin.Size) - int(s.WriteOff-s.AckedPrefix)
}

// HasRetx: something lost must go out again.
func (s *State) HasRetx() bool {
	return !s.retx.Empty() || (s.openPending && s.sentOff > 0) || (s.finLost && !s.finAcked)
}

// HasNew: new data, the open or the FIN must go out.
func (s *State) HasNew() bool {
	return s.sentOff < s.WriteOff || (s.openPending && s.sentOff == 0) || (s.finQueued && !s.finSent)
}

// CanSendNew: new data within the peer's stream credit, the open or the
// FIN can go out now.
func (s *State) CanSendNew() bool {
	return (s.sentOff < s.WriteOff && s.sentOff < s.PeerMax) ||
		(s.openPending && s.sentOff == 0) ||
		(s.finQueued && !s.finSent && s.sentOff == s.WriteOff)
}

func (s *State) SendDone() bool {
	return s.finAcked && s.AckedPrefix == s.finOffset
}

func (s *State) RecvDone() bool {
	return s.finKnown && s.ReadOff == s.finalSize
}

func (s *State) Aborted() bool { return s.ResetSent || s.PeerReset }

// MaybeGrowSendBuffer ends a send-buffer epoch once a quarter of the
// buffer was acknowledged since it began: the buffer doubles, up to
// limit, if the application found it full meanwhile and the acknowledged
// drain filled half of it per smoothed RTT (Window.Update), so it keeps up
// with a link faster than the configured (or unknown) rate. The caller
// wakes a waiting writer.
func (s *State) MaybeGrowSendBuffer(limit uint64, now, srtt time.Duration) {
	if s.AckedPrefix-s.SendWin.EpochOff < s.SendWin.Size/4 {
		return
	}
	if !s.sendLimited {
		limit = s.SendWin.Size // measure only: no growth unless the writer waited
	}
	s.SendWin.Update(s.AckedPrefix, limit, now, srtt)
	s.sendLimited = false
}
