package scps

// This file owns streamState, the per-stream state of the sans-IO core: the
// send half (buffered bytes, what was sent, acknowledged and must be
// repaired, FIN and open metadata, peer credit) and the receive half
// (reassembly, what the application consumed, credit we granted and its
// auto-tuning), each with its window (window.go).

import (
	"scpsvpn/scps/internal/bufq"
	"scpsvpn/scps/internal/ranges"
)

// lightThreshold: a stream with at most this much unsent new data, whose
// writer is not waiting for room, is scheduled in the light queue, ahead
// of bulk streams, so a request made during a big download waits for no
// queue. A writer that waits has more to send than its buffer holds: bulk,
// however small the buffer (a memory budget shared by thousands of
// uploads leaves each a few KiB, memory.go).
const lightThreshold = 16 << 10

type streamState struct {
	id    uint64
	local bool // opened by us
	meta  []byte
	gone  bool // removed from the table; queue entries are stale

	// Send half.
	sendBuf     bufq.Buffer
	writeOff    uint64     // end of data written by the application
	sentOff     uint64     // next new byte to send
	ackedPrefix uint64     // every byte below is acknowledged
	acked       ranges.Set // acknowledged ranges above ackedPrefix
	retx        ranges.Set // lost ranges waiting for repair
	peerMax     uint64     // send credit granted by the peer
	finQueued   bool       // CloseWrite called; finOffset valid
	finOffset   uint64
	finSent     bool // FIN went out at least once
	finLost     bool // the frame carrying FIN was lost; send it again
	finAcked    bool
	openPending bool // a local stream whose offset-0 frame must (again) go out empty
	openAcked   bool // a frame at offset 0 was acknowledged: metadata delivered
	writeWait   bool // the application waits for send-buffer space
	creditWait  bool // has new data but no stream credit

	sendWin     window // send buffer size, auto-tuned on the acknowledged offset
	sendLimited bool   // the buffer was full for the application this epoch
	budgetWait  bool   // the writer waits for the memory budget (memory.go)
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
	recvMax     uint64 // credit we granted
	recvWin     window // receive window, auto-tuned on the read offset
	credited    uint64 // recvMax-readOff counted in memBudget.recvGranted

	maxDataQueued bool // a MAX_STREAM_DATA for this stream is queued
	metaKnown     bool // peer stream: its metadata arrived (accept event sent)
	readWait      bool // the application waits for data
	eofRead       bool // the application was told io.EOF
	readClosed    bool // the application closed: discard what still comes
	peerReset     bool // the peer's RESET_STREAM arrived
	peerCode      uint64

	eventQueued bool // an EventStream is pending for the application
	queued      uint8
}

// queue membership bits
const (
	inRetxQ uint8 = 1 << iota
	inNewQ
	inCtrlQ
)

func (s *streamState) contiguous() uint64 {
	if s.recvd.Empty() {
		return s.readOff
	}
	f := s.recvd.First()
	if f.Start > s.readOff {
		return s.readOff
	}
	return f.End
}

// readable: data or EOF is available to the application.
func (s *streamState) readable() bool {
	return s.contiguous() > s.readOff || (s.finKnown && s.readOff == s.finalSize)
}

func (s *streamState) unsent() uint64 { return s.writeOff - s.sentOff }

// sendSpace is how many more bytes the send buffer accepts.
func (s *streamState) sendSpace() int {
	return int(s.sendWin.size) - int(s.writeOff-s.ackedPrefix)
}

// hasRetx: something lost must go out again.
func (s *streamState) hasRetx() bool {
	return !s.retx.Empty() || (s.openPending && s.sentOff > 0) || (s.finLost && !s.finAcked)
}

// hasNew: new data, the open or the FIN must go out.
func (s *streamState) hasNew() bool {
	return s.sentOff < s.writeOff || (s.openPending && s.sentOff == 0) || (s.finQueued && !s.finSent)
}

// canSendNew: new data within the peer's stream credit, the open or the
// FIN can go out now.
func (s *streamState) canSendNew() bool {
	return (s.sentOff < s.writeOff && s.sentOff < s.peerMax) ||
		(s.openPending && s.sentOff == 0) ||
		(s.finQueued && !s.finSent && s.sentOff == s.writeOff)
}

func (s *streamState) sendDone() bool {
	return s.finAcked && s.ackedPrefix == s.finOffset
}

func (s *streamState) recvDone() bool {
	return s.finKnown && s.readOff == s.finalSize
}

func (s *streamState) aborted() bool { return s.resetSent || s.peerReset }
