package scps

// This file owns the errors the package returns and the application error
// codes it uses itself.

import (
	"errors"
	"fmt"

	"scpsvpn/scps/internal/streams"
)

// ResetError is returned by Stream.Read and Stream.Write after the peer
// reset the stream (or closed the association) with Code. The streams
// return it (internal/streams/streamapi.go).
type ResetError = streams.ResetError

// PeerClosedError is the association error after the peer sent CLOSE.
type PeerClosedError struct {
	Code   uint64
	Reason string
}

func (e *PeerClosedError) Error() string {
	return fmt.Sprintf("scps: association closed by peer (code %d: %q)", e.Code, e.Reason)
}

// Codes the package itself puts in RESET_STREAM and CLOSE frames.
const (
	// CodeNoError: normal close.
	CodeNoError = 0
	// CodeStreamClosed resets a stream the application closed with unread
	// data, or that received data after the application closed it.
	CodeStreamClosed = streams.CodeStreamClosed
	// CodeProtocolViolation closes an association whose peer broke the
	// protocol (flow control, final size).
	CodeProtocolViolation = 0xa
	// CodeIdleTimeout closes an association that heard nothing for
	// IdleTimeout.
	CodeIdleTimeout = 0xb
	// CodeOutage closes an association whose link outage outlasted
	// MaxOutage.
	CodeOutage = 0xc
)

var (
	// ErrClosed: the association (or session) was closed locally.
	ErrClosed = errors.New("scps: association closed")
	// ErrIdleTimeout: nothing was received for Config.IdleTimeout.
	ErrIdleTimeout = errors.New("scps: idle timeout")
	// ErrOutage: a link outage lasted longer than Config.MaxOutage; the
	// association closed and its streams were reset.
	ErrOutage = errors.New("scps: link outage outlasted MaxOutage")
	// ErrProtocol: the peer broke the protocol; the association closed.
	ErrProtocol = errors.New("scps: protocol violation by peer")
	// ErrRangesFull: a packet was dropped unacknowledged because its
	// stream frames would leave too many received ranges (recvranges.go).
	ErrRangesFull = streams.ErrRangesFull
	// ErrBadPacket wraps the reason a received packet was rejected.
	ErrBadPacket = errors.New("scps: bad packet")
	// ErrStreamClosed: the stream was closed or reset locally.
	ErrStreamClosed = streams.ErrStreamClosed
	// ErrWriteClosed: Write after CloseWrite.
	ErrWriteClosed = streams.ErrWriteClosed
	// ErrUnknownStream: no such stream (never opened, or already gone).
	ErrUnknownStream = streams.ErrUnknownStream
	// ErrStreamLimit: too many streams wait for the peer's stream credit.
	ErrStreamLimit = streams.ErrStreamLimit
	// ErrMetaTooLarge: stream metadata over MaxMetaSize.
	ErrMetaTooLarge = streams.ErrMetaTooLarge
	// ErrDatagramTooLarge: datagram over MaxDatagramSize.
	ErrDatagramTooLarge = errors.New("scps: datagram too large")
	// ErrDatagramDropped: the datagram queue was full; the datagram was
	// dropped and counted.
	ErrDatagramDropped = errors.New("scps: datagram dropped (queue full)")
	// ErrTimeout is returned by stream operations whose deadline passed; it
	// reports Timeout() == true like net errors do.
	ErrTimeout error = timeoutError{}
)

type timeoutError struct{}

func (timeoutError) Error() string   { return "scps: i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
