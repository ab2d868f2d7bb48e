package tunneltest

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// ReceiveBatch is the most datagrams one Conn.Receive hands over, as many
// as the real socket's batch.
const ReceiveBatch = 64

// connQueue is how many datagrams a Conn holds unread; more are dropped,
// as by a full socket buffer.
const connQueue = 8192

// Wire joins Conns by address, like a lossless LAN. A filter may drop
// datagrams in flight (a cut cable); a full receive queue drops too, as a
// socket buffer does.
type Wire struct {
	mu     sync.Mutex
	conns  map[netip.AddrPort]*Conn
	filter atomic.Pointer[func(from, to netip.AddrPort) bool]
	loss   atomic.Pointer[func() bool]
	drops  atomic.Uint64
}

// NewWire returns a wire with no sockets on it.
func NewWire() *Wire { return &Wire{conns: map[netip.AddrPort]*Conn{}} }

// SetFilter installs f (nil removes it): datagrams for which it returns
// false are lost. It is safe to call while datagrams flow.
func (w *Wire) SetFilter(f func(from, to netip.AddrPort) bool) {
	if f == nil {
		w.filter.Store(nil)
		return
	}
	w.filter.Store(&f)
}

// SetLoss installs lose (nil removes it), asked for each datagram of a
// batch: those for which it returns true are lost, as a lossy link loses
// packets one by one (a filter drops a whole batch). It is safe to call
// while datagrams flow.
func (w *Wire) SetLoss(lose func() bool) {
	if lose == nil {
		w.loss.Store(nil)
		return
	}
	w.loss.Store(&lose)
}

// Drops counts the datagrams lost to full receive queues.
func (w *Wire) Drops() uint64 { return w.drops.Load() }

// Listen binds a socket to addr. A closed socket's address may be bound
// again; binding one in use is a mistake of the test and panics.
func (w *Wire) Listen(addr netip.AddrPort) *Conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.conns[addr]; old != nil && !old.Closed() {
		panic("tunneltest: " + addr.String() + " in use")
	}
	c := &Conn{w: w, addr: addr, q: make(chan datagram, connQueue), closed: make(chan struct{})}
	w.conns[addr] = c
	return c
}

type datagram struct {
	src  netip.AddrPort
	data []byte
}

// Conn is one socket on a Wire: a tunnel.PacketConn.
type Conn struct {
	w      *Wire
	addr   netip.AddrPort
	q      chan datagram
	closed chan struct{}
	once   sync.Once
	sent   atomic.Uint64
	// largest is the biggest datagram sent to each address.
	largestMu sync.Mutex
	largest   map[netip.AddrPort]int
}

// Closed reports whether Close was called.
func (c *Conn) Closed() bool { return isDone(c.closed) }

// Receive waits for a datagram and calls f for it and for those queued
// behind it, up to ReceiveBatch; after Close it returns net.ErrClosed.
func (c *Conn) Receive(f func(src netip.AddrPort, pkt []byte)) error {
	var d datagram
	select {
	case d = <-c.q:
	case <-c.closed:
		return net.ErrClosed
	}
	f(d.src, d.data)
	for range ReceiveBatch - 1 {
		select {
		case d = <-c.q:
			f(d.src, d.data)
		default:
			return nil
		}
	}
	return nil
}

// Send puts a copy of each datagram in the queue of the socket bound to
// to, unless the filter drops it; with no socket there it is lost, as
// UDP is.
func (c *Conn) Send(pkts [][]byte, to netip.AddrPort) error {
	if c.Closed() {
		return net.ErrClosed
	}
	c.sent.Add(uint64(len(pkts)))
	c.largestMu.Lock()
	if c.largest == nil {
		c.largest = map[netip.AddrPort]int{}
	}
	for _, p := range pkts {
		c.largest[to] = max(c.largest[to], len(p))
	}
	c.largestMu.Unlock()
	if f := c.w.filter.Load(); f != nil && !(*f)(c.addr, to) {
		return nil
	}
	c.w.mu.Lock()
	dst := c.w.conns[to]
	c.w.mu.Unlock()
	if dst == nil || dst.Closed() {
		return nil
	}
	lose := c.w.loss.Load()
	for _, p := range pkts {
		if lose != nil && (*lose)() {
			continue
		}
		select {
		case dst.q <- datagram{src: c.addr, data: append([]byte(nil), p...)}:
		default:
			c.w.drops.Add(1)
		}
	}
	return nil
}

// SendNow never waits, as Send does not either.
func (c *Conn) SendNow(p []byte, to netip.AddrPort) error {
	return c.Send([][]byte{p}, to)
}

// Queued counts the datagrams that arrived and wait to be received.
func (c *Conn) Queued() int { return len(c.q) }

// LocalAddr is the address the socket is bound to.
func (c *Conn) LocalAddr() netip.AddrPort { return c.addr }

// Sent counts the datagrams sent, whether or not they arrived.
func (c *Conn) Sent() uint64 { return c.sent.Load() }

// LargestTo is the biggest datagram sent to addr so far.
func (c *Conn) LargestTo(addr netip.AddrPort) int {
	c.largestMu.Lock()
	defer c.largestMu.Unlock()
	return c.largest[addr]
}

// Close ends pending and later receives; it may be called more than once.
func (c *Conn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
