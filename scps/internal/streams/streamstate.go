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
	Local bool // opened by us
	Meta  []byte
	Gone  bool // removed from the table; queue entries are stale

	// Send half.
	SendBuf     bufq.Buffer
	WriteOff    uint64     // end of data written by the application
	SentOff     uint64     // next new byte to send
	AckedPrefix uint64     // every byte below is acknowledged
	Acked       ranges.Set // acknowledged ranges above ackedPrefix
	Retx        ranges.Set // lost ranges waiting for repair
	PeerMax     uint64     // send credit granted by the peer
	FinQueued   bool       // CloseWrite called; finOffset valid
	FinOffset   uint64
	FinSent     bool // FIN went out at least once
	FinLost     bool // the frame carrying FIN was lost; send it again
	FinAcked    bool
	OpenPending bool // a local stream whose offset-0 frame must (again) go out empty
	OpenAcked   bool // a frame at offset 0 was acknowledged: metadata delivered
	WriteWait   bool // the application waits for send-buffer space
	CreditWait  bool // has new data but no stream credit

	SendWin     Window // send buffer size, auto-tuned on the acknowledged offset
	SendLimited bool   // the buffer was full for the application this epoch
	BudgetWait  bool   // the writer waits for the memory budget (MemBudget)
	SendFreed   bool   // aborted: the send buffer's bytes left the budget

	ResetQueued bool // our RESET_STREAM must (again) go out
	ResetSent   bool // our RESET_STREAM went out (or is queued): the stream is aborted
	ResetAcked  bool
	ResetCode   uint64
	LocalErr    error // why the application may no longer use the stream, if it was us

	// Receive half.
	RecvBuf     bufq.Buffer
	Recvd       ranges.Set // received ranges at or above readOff
	ReadOff     uint64     // next byte the application reads
	HighestRecv uint64     // highest offset received (counts toward connection credit)
	SettledOff  uint64     // below it, connection credit was returned (connflow.go)
	FinKnown    bool
	FinalSize   uint64
	RecvMax     uint64 // credit we granted
	RecvWin     Window // receive window, auto-tuned on the read offset
	Credited    uint64 // RecvMax-ReadOff counted in MemBudget.RecvGranted

	MaxDataQueued bool // a MAX_STREAM_DATA for this stream is queued
	MetaKnown     bool // peer stream: its metadata arrived (accept event sent)
	ReadWait      bool // the application waits for data
	EOFRead       bool // the application was told io.EOF
	ReadClosed    bool // the application closed: discard what still comes
	PeerReset     bool // the peer's RESET_STREAM arrived
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
	return s.Contiguous() > s.ReadOff || (s.FinKnown && s.ReadOff == s.FinalSize)
}

func (s *State) Unsent() uint64 { return s.WriteOff - s.SentOff }

// SendSpace is how many more bytes the send buffer accepts.
func (s *State) SendSpace() int {
	return int(s.SendWin.Size) - int(s.WriteOff-s.AckedPrefix)
}

// HasRetx: something lost must go out again.
func (s *State) HasRetx() bool {
	return !s.Retx.Empty() || (s.OpenPending && s.SentOff > 0) || (s.FinLost && !s.FinAcked)
}

// HasNew: new data, the open or the FIN must go out.
func (s *State) HasNew() bool {
	return s.SentOff < s.WriteOff || (s.OpenPending && s.SentOff == 0) || (s.FinQueued && !s.FinSent)
}

// CanSendNew: new data within the peer's stream credit, the open or the
// FIN can go out now.
func (s *State) CanSendNew() bool {
	return (s.SentOff < s.WriteOff && s.SentOff < s.PeerMax) ||
		(s.OpenPending && s.SentOff == 0) ||
		(s.FinQueued && !s.FinSent && s.SentOff == s.WriteOff)
}

func (s *State) SendDone() bool {
	return s.FinAcked && s.AckedPrefix == s.FinOffset
}

func (s *State) RecvDone() bool {
	return s.FinKnown && s.ReadOff == s.FinalSize
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
	if !s.SendLimited {
		limit = s.SendWin.Size // measure only: no growth unless the writer waited
	}
	s.SendWin.Update(s.AckedPrefix, limit, now, srtt)
	s.SendLimited = false
}
