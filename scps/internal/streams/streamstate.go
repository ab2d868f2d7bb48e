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

// LightRun: a stream that has sent this much since all it wrote was last
// acknowledged is bulk, however little it has unsent (State.light).
const LightRun = 1 << 20

// State is one stream's state in the association's core. Its fields are
// the streams package's: the rest of the core changes a stream only
// through Manager and reads it through the methods below (its id, why it
// closed, and the figures statistics and tests check bounds with).
type State struct {
	id    uint64
	local bool // opened by us
	meta  []byte
	gone  bool // removed from the table; queue entries are stale

	// Send half.
	sendBuf     bufq.Buffer
	writeOff    uint64     // end of data written by the application
	sentOff     uint64     // next new byte to send
	ackedPrefix uint64     // every byte below is acknowledged
	runStart    uint64     // writeOff when all written was last acknowledged: where the current run of sending began
	acked       ranges.Set // acknowledged ranges above ackedPrefix
	retx        ranges.Set // lost ranges waiting for repair
	peerMax     uint64     // send credit granted by the peer
	peerMaxPN   uint64     // 1 + the packet number of the MAX_STREAM_DATA that set peerMax; 0: none yet
	finQueued   bool       // CloseWrite called; finOffset valid
	finOffset   uint64
	finSent     bool // FIN went out at least once
	finLost     bool // the frame carrying FIN was lost; send it again
	finAcked    bool
	openPending bool // a local stream whose offset-0 frame must (again) go out empty
	openAcked   bool // a frame at offset 0 was acknowledged: metadata delivered
	writeWait   bool // the application waits for send-buffer space
	creditWait  bool // has new data but no stream credit

	sendWin     Window // send buffer size, auto-tuned on the acknowledged offset
	sendLimited bool   // the buffer was full for the application this epoch
	budgetWait  bool   // the writer waits for the memory budget (MemBudget)
	unsentWait  bool   // the writer waits for its unsent data to go out (Manager.UnsentShare)
	unsentHeld  bool   // its writer was held by its unsent share and has not finished or drained: bulk (light)
	bulkRun     bool   // it went in the bulk queue and has not drained since: its tail is bulk too (light)
	sendFreed   bool   // aborted: the send buffer's bytes left the budget

	resetQueued bool // our RESET_STREAM must (again) go out
	resetSent   bool // our RESET_STREAM went out (or is queued): the stream is aborted
	resetAcked  bool
	resetCode   uint64
	localErr    error // why the application may no longer use the stream, if it was us

	// Receive half.
	recvBuf     bufq.Buffer
	recvd       ranges.Set // received ranges at or above readOff
	readOff     uint64     // next byte the application reads
	highestRecv uint64     // highest offset received (counts toward connection credit)
	settledOff  uint64     // below it, connection credit was returned (connflow.go)
	finKnown    bool
	finalSize   uint64
	recvMax     uint64 // credit we grant now; a stalled reader's is cut (readerstall.go)
	recvBound   uint64 // the most credit we ever granted: the peer may have sent up to it
	recvWin     Window // receive window, auto-tuned on the read offset
	credited    uint64 // recvMax-readOff counted in MemBudget.RecvGranted

	maxDataQueued bool          // a MAX_STREAM_DATA for this stream is queued
	metaKnown     bool          // peer stream: its metadata arrived (accept event sent)
	readWait      bool          // the application waits for data
	waiting       bool          // in-order data waited unread ever since waitSince (readerstall.go)
	waitSince     time.Duration // when it began to wait
	waitOff       uint64        // the read offset then
	cut           bool          // its window was cut: it grows by doubling only
	eofRead       bool          // the application was told io.EOF
	readClosed    bool          // the application closed: discard what still comes
	peerReset     bool          // the peer's RESET_STREAM arrived
	peerCode      uint64

	eventQueued bool // an EventStream is pending for the application
	queued      uint8
}

// ID is the stream's id.
func (s *State) ID() uint64 { return s.id }

// CloseErr is why s left the table, for the application: nil when both
// directions finished, a *ResetError when the peer reset it, our own
// reason when we reset it.
func (s *State) CloseErr() error {
	switch {
	case s.localErr == nil && s.peerReset:
		return &ResetError{Code: s.peerCode}
	case s.resetSent:
		return s.localErr
	}
	return nil
}

// EventTaken: the driver took the stream event queued for s (Manager's
// notify queues at most one at a time), so the next change queues
// another.
func (s *State) EventTaken() { s.eventQueued = false }

// The figures below let the association's statistics and tests check the
// bounds a stream keeps without reaching into its state.

// Buffered is how many bytes s's send and receive buffers hold in memory.
func (s *State) Buffered() (send, recv int) { return s.sendBuf.Bytes(), s.recvBuf.Bytes() }

// SendHeld is what s's send buffer must keep: written and not yet
// acknowledged; at most SendWindow.
func (s *State) SendHeld() uint64 { return s.writeOff - s.ackedPrefix }

// SendWindow is the send buffer's size, as auto-tuned.
func (s *State) SendWindow() uint64 { return s.sendWin.Size }

// Received is the highest offset the peer sent on s: how much it sent,
// read or not.
func (s *State) Received() uint64 { return s.highestRecv }

// RecvHeld is what the peer sent on s up to its highest offset that the
// application has not read.
func (s *State) RecvHeld() uint64 { return s.highestRecv - s.readOff }

// RecvCredit is the stream credit granted beyond what the application
// read.
func (s *State) RecvCredit() uint64 { return s.recvMax - s.readOff }

// RecvWindow is the receive window's size, as auto-tuned.
func (s *State) RecvWindow() uint64 { return s.recvWin.Size }

// Unsettled is how many received bytes of s were not yet returned to
// connection credit (connflow.go).
func (s *State) Unsettled() uint64 { return s.highestRecv - s.settledOff }

// Ranges is how many received ranges s holds above the read offset (at
// most MaxStreamRanges, recvranges.go).
func (s *State) Ranges() int { return s.recvd.Len() }

// Queue membership bits (State.queued): which of Map's queues hold the
// stream.
const (
	inRetxQ uint8 = 1 << iota
	inNewQ
	inCtrlQ
)

func (s *State) Contiguous() uint64 {
	if s.recvd.Empty() {
		return s.readOff
	}
	f := s.recvd.First()
	if f.Start > s.readOff {
		return s.readOff
	}
	return f.End
}

// Readable: data or EOF is available to the application.
func (s *State) Readable() bool {
	return s.Contiguous() > s.readOff || (s.finKnown && s.readOff == s.finalSize)
}

// Unsent is how much written data has not gone out yet.
func (s *State) Unsent() uint64 { return s.writeOff - s.sentOff }

// SendCredit is how much new data the peer's stream credit still lets
// out, for traces of a stream held back by flow control.
func (s *State) SendCredit() uint64 { return s.peerMax - s.sentOff }

// SendSpace is how many more bytes the send buffer accepts.
func (s *State) SendSpace() int {
	return int(s.sendWin.Size) - int(s.writeOff-s.ackedPrefix)
}

// HasRetx: something lost must go out again.
func (s *State) HasRetx() bool {
	return !s.retx.Empty() || (s.openPending && s.sentOff > 0) || (s.finLost && !s.finAcked)
}

// HasNew: new data, the open or the FIN must go out.
func (s *State) HasNew() bool {
	return s.sentOff < s.writeOff || (s.openPending && s.sentOff == 0) || (s.finQueued && !s.finSent)
}

// CanSendNew: new data within the peer's stream credit, the open or the
// FIN can go out now.
func (s *State) CanSendNew() bool {
	return (s.sentOff < s.writeOff && s.sentOff < s.peerMax) ||
		(s.openPending && s.sentOff == 0) ||
		(s.finQueued && !s.finSent && s.sentOff == s.writeOff)
}

func (s *State) SendDone() bool {
	return s.finAcked && s.ackedPrefix == s.finOffset
}

func (s *State) RecvDone() bool {
	return s.finKnown && s.readOff == s.finalSize
}

func (s *State) Aborted() bool { return s.resetSent || s.peerReset }

// MaybeGrowSendBuffer ends a send-buffer epoch once a quarter of the
// buffer was acknowledged since it began: the buffer doubles, up to
// limit, if the application found it full meanwhile and the acknowledged
// drain filled half of it per smoothed RTT (Window.Update), so it keeps up
// with a link faster than the configured (or unknown) rate. The caller
// wakes a waiting writer.
func (s *State) MaybeGrowSendBuffer(limit uint64, now, srtt time.Duration) {
	if s.ackedPrefix-s.sendWin.EpochOff < s.sendWin.Size/4 {
		return
	}
	if !s.sendLimited {
		limit = s.sendWin.Size // measure only: no growth unless the writer waited
	}
	s.sendWin.Update(s.ackedPrefix, limit, now, srtt)
	s.sendLimited = false
}
