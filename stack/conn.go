// This file owns Conn, the net.Conn the tunnel copies bytes through, and the
// mapping of gVisor's errors onto errno-style sentinels so the tunnel can
// tell a reset from an orderly close with errors.Is.

package stack

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/waiter"
)

// Sentinel errors. The connection errors wrap their errno, so both
// errors.Is(err, ErrRefused) and errors.Is(err, syscall.ECONNREFUSED) hold.
var (
	ErrRefused     = fmt.Errorf("stack: connection refused: %w", syscall.ECONNREFUSED)
	ErrReset       = fmt.Errorf("stack: connection reset: %w", syscall.ECONNRESET)
	ErrAborted     = fmt.Errorf("stack: connection aborted: %w", syscall.ECONNABORTED)
	ErrTimeout     = fmt.Errorf("stack: connection timed out: %w", syscall.ETIMEDOUT)
	ErrAddrInUse   = fmt.Errorf("stack: 4-tuple in use: %w", syscall.EADDRINUSE)
	ErrFlowLimit   = errors.New("stack: too many flows (MaxFlows)")
	ErrClosed      = fmt.Errorf("stack: closed: %w", net.ErrClosed)
	ErrRequestDone = errors.New("stack: request already accepted or refused")
	// ErrWouldBlock is ReadSome's answer when nothing is ready to read.
	ErrWouldBlock = errors.New("stack: nothing to read yet")
)

// Conn is an established TCP connection in the stack: a gonet.TCPConn (so
// it works with io.Copy and deadlines) plus half-close and abort. Read and
// Write errors are *net.OpError whose Err is one of the sentinels above when
// the cause is known.
type Conn struct {
	*gonet.TCPConn
	ep tcpip.Endpoint
	wq *waiter.Queue
	s  *Stack
	// lw limits ReadSome's reads; there is one reader.
	lw tcpip.LimitedWriter
	// charge is what the connection took from the buffer budget.
	charge int64

	closeOnce sync.Once
}

var _ net.Conn = (*Conn)(nil)

// Read reads from the connection. Not reading closes the TCP receive window
// once the endpoint's buffer is full: the peer's writes then block.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	return n, translate(err)
}

// Write writes to the connection, blocking while the send buffer is full.
func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.TCPConn.Write(b)
	return n, translate(err)
}

// ReadSome moves up to max bytes of received data into w, from the
// stack's own buffers (no copy through a buffer of the caller's), without
// waiting: it returns ErrWouldBlock when nothing is ready (WaitReadable
// waits for that), io.EOF after the peer's FIN. w must not block: the
// connection is locked while it runs. Not for use beside Read.
func (c *Conn) ReadSome(w io.Writer, max int) (int, error) {
	c.lw = tcpip.LimitedWriter{W: w, N: int64(max)}
	res, terr := c.ep.Read(&c.lw, tcpip.ReadOptions{})
	c.lw.W = nil
	switch terr.(type) {
	case nil:
		return res.Count, nil
	case *tcpip.ErrWouldBlock:
		return 0, ErrWouldBlock
	case *tcpip.ErrClosedForReceive:
		return 0, io.EOF
	}
	return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: tcpipError(terr)}
}

// WaitReadable waits until ReadSome has something to return: data, the
// peer's FIN, or an error (a reset, an abort, the stack closing); or
// until stop is closed (nil: never), when what the bytes were for is
// gone.
func (c *Conn) WaitReadable(stop <-chan struct{}) {
	const events = waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr
	e, ch := waiter.NewChannelEntry(events)
	c.wq.EventRegister(&e)
	defer c.wq.EventUnregister(&e)
	if c.ep.Readiness(events) == 0 {
		select {
		case <-ch:
		case <-stop:
		}
	}
}

// CloseWrite sends FIN; reads continue until the peer closes its side.
func (c *Conn) CloseWrite() error {
	return translate(c.TCPConn.CloseWrite())
}

// Close closes the connection gracefully (FIN, or RST if unread data is
// left, as a kernel socket does) and releases its flow slot.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.TCPConn.Close()
		c.s.forget(c)
	})
	return nil
}

// Abort sends RST at once, discards buffered data, and releases the
// connection; pending Reads and Writes fail. Use it when the far side
// refused or reset, so the local peer sees the failure too.
func (c *Conn) Abort() {
	c.closeOnce.Do(func() {
		c.ep.Abort()
		c.TCPConn.Close()
		c.s.forget(c)
	})
}

// LocalAddrPort and RemoteAddrPort return the endpoint's addresses.
func (c *Conn) LocalAddrPort() netip.AddrPort {
	a, err := c.ep.GetLocalAddress()
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(addrFrom(a.Addr), a.Port)
}

// RemoteAddrPort returns the peer's address and port.
func (c *Conn) RemoteAddrPort() netip.AddrPort {
	a, err := c.ep.GetRemoteAddress()
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(addrFrom(a.Addr), a.Port)
}

// errByText maps the text gonet puts in its errors (it flattens gVisor's
// typed errors with errors.New(err.String())) back to sentinels.
var errByText = map[string]error{
	(&tcpip.ErrConnectionRefused{}).String(): ErrRefused,
	(&tcpip.ErrConnectionReset{}).String():   ErrReset,
	(&tcpip.ErrConnectionAborted{}).String(): ErrAborted,
	(&tcpip.ErrAborted{}).String():           ErrAborted,
	(&tcpip.ErrTimeout{}).String():           ErrTimeout,
	(&tcpip.ErrClosedForSend{}).String():     fmt.Errorf("stack: closed for send: %w", syscall.EPIPE),
	(&tcpip.ErrNotConnected{}).String():      fmt.Errorf("stack: not connected: %w", syscall.ENOTCONN),
}

// translate replaces a gonet error's flattened cause with its sentinel.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Err == nil {
		return err
	}
	if s, ok := errByText[op.Err.Error()]; ok {
		cp := *op
		cp.Err = s
		return &cp
	}
	return err
}

// tcpipError maps a gVisor error to a sentinel or a plain error.
func tcpipError(terr tcpip.Error) error {
	switch terr.(type) {
	case *tcpip.ErrConnectionRefused:
		return ErrRefused
	case *tcpip.ErrConnectionReset:
		return ErrReset
	case *tcpip.ErrConnectionAborted, *tcpip.ErrAborted:
		return ErrAborted
	case *tcpip.ErrTimeout:
		return ErrTimeout
	case *tcpip.ErrPortInUse, *tcpip.ErrBadLocalAddress:
		return ErrAddrInUse
	}
	return errors.New(terr.String())
}

// opError builds a *net.OpError for a failed accept or dial.
func opError(op string, local, remote netip.AddrPort, terr tcpip.Error) error {
	return &net.OpError{
		Op:     op,
		Net:    "tcp",
		Source: net.TCPAddrFromAddrPort(local),
		Addr:   net.TCPAddrFromAddrPort(remote),
		Err:    tcpipError(terr),
	}
}
