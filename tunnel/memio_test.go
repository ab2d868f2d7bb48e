package tunnel

// In-memory doubles of the endpoint's operating-system parts (system.go):
// a TUN whose far side is a function, a UDP "wire" joining any number of
// sockets by address, and a network configuration that only records. With
// them whole endpoints run inside one test process, without root.

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
)

// memTUN is a TUN device. Packets the kernel would send into it are given
// to send; packets the endpoint writes go to deliver (a copy each).
type memTUN struct {
	in      chan []byte
	deliver func(pkt []byte)
	closed  chan struct{}
	once    sync.Once
}

const memTUNBatch = 8

func newMemTUN(deliver func(pkt []byte)) *memTUN {
	return &memTUN{in: make(chan []byte, 4096), deliver: deliver, closed: make(chan struct{})}
}

// send queues one packet for the endpoint to read, as the kernel routing it
// into the TUN; false once the TUN is closed.
func (t *memTUN) send(pkt []byte) bool {
	select {
	case t.in <- append([]byte(nil), pkt...):
		return true
	case <-t.closed:
		return false
	}
}

func (t *memTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := 0
	put := func(p []byte) {
		sizes[n] = copy(bufs[n][offset:], p)
		n++
	}
	select {
	case p := <-t.in:
		put(p)
	case <-t.closed:
		return 0, os.ErrClosed
	}
	for n < len(bufs) {
		select {
		case p := <-t.in:
			put(p)
		default:
			return n, nil
		}
	}
	return n, nil
}

func (t *memTUN) Write(bufs [][]byte, offset int) (int, error) {
	if t.isClosed() {
		return 0, os.ErrClosed
	}
	for _, b := range bufs {
		t.deliver(append([]byte(nil), b[offset:]...))
	}
	return len(bufs), nil
}

func (t *memTUN) isClosed() bool { return isDone(t.closed) }

// isDone reports whether ch is closed.
func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (t *memTUN) BatchSize() int { return memTUNBatch }

func (t *memTUN) Close() error {
	t.once.Do(func() { close(t.closed) })
	return nil
}

// memWire joins memConns by address, like a lossless LAN. A filter may drop
// datagrams in flight (a cut cable); a full receive queue drops too, as a
// socket buffer does.
type memWire struct {
	mu     sync.Mutex
	conns  map[netip.AddrPort]*memConn
	filter atomic.Pointer[func(from, to netip.AddrPort) bool]
	drops  atomic.Uint64
}

func newMemWire() *memWire { return &memWire{conns: map[netip.AddrPort]*memConn{}} }

// setFilter installs f (nil removes it): datagrams for which it returns
// false are lost.
func (w *memWire) setFilter(f func(from, to netip.AddrPort) bool) {
	if f == nil {
		w.filter.Store(nil)
		return
	}
	w.filter.Store(&f)
}

type memDatagram struct {
	src  netip.AddrPort
	data []byte
}

// memConn is one socket on the wire.
type memConn struct {
	w      *memWire
	addr   netip.AddrPort
	q      chan memDatagram
	closed chan struct{}
	once   sync.Once
	sent   atomic.Uint64
	// largest is the biggest datagram sent to each address.
	largestMu sync.Mutex
	largest   map[netip.AddrPort]int
}

// listen binds addr; a closed socket's address may be bound again.
func (w *memWire) listen(addr netip.AddrPort) *memConn {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.conns[addr]; old != nil && !old.isClosed() {
		panic("memWire: " + addr.String() + " in use")
	}
	c := &memConn{w: w, addr: addr, q: make(chan memDatagram, 8192), closed: make(chan struct{})}
	w.conns[addr] = c
	return c
}

func (c *memConn) isClosed() bool { return isDone(c.closed) }

func (c *memConn) Receive(f func(src netip.AddrPort, pkt []byte)) error {
	var d memDatagram
	select {
	case d = <-c.q:
	case <-c.closed:
		return net.ErrClosed
	}
	f(d.src, d.data)
	for range udpBatch - 1 {
		select {
		case d = <-c.q:
			f(d.src, d.data)
		default:
			return nil
		}
	}
	return nil
}

func (c *memConn) Send(pkts [][]byte, to netip.AddrPort) error {
	if c.isClosed() {
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
	if dst == nil || dst.isClosed() {
		return nil // nobody there: lost, as UDP is
	}
	for _, p := range pkts {
		select {
		case dst.q <- memDatagram{src: c.addr, data: append([]byte(nil), p...)}:
		default:
			c.w.drops.Add(1)
		}
	}
	return nil
}

// SendNow never waits: Send does not either.
func (c *memConn) SendNow(p []byte, to netip.AddrPort) error {
	return c.Send([][]byte{p}, to)
}

func (c *memConn) LocalAddr() netip.AddrPort { return c.addr }

// largestTo is the biggest datagram sent to addr so far.
func (c *memConn) largestTo(addr netip.AddrPort) int {
	c.largestMu.Lock()
	defer c.largestMu.Unlock()
	return c.largest[addr]
}

func (c *memConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// memNet records the network configuration the endpoint asks for.
type memNet struct {
	failUp     error                 // Up returns it when set
	failRoutes atomic.Pointer[error] // SetRoutes returns it when set

	mu     sync.Mutex
	addrs  []netip.Prefix
	routes []netip.Prefix
	isUp   bool
	downs  int
}

func (n *memNet) Up(addrs []netip.Prefix) error {
	if n.failUp != nil {
		return n.failUp
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrs, n.isUp = slices.Clone(addrs), true
	return nil
}

func (n *memNet) SetRoutes(subnets []netip.Prefix) error {
	if err := n.failRoutes.Load(); err != nil {
		return *err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes = slices.Clone(subnets)
	return nil
}

func (n *memNet) Down() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes = nil
	n.downs++
}

// routeList returns the routes into the TUN, sorted.
func (n *memNet) routeList() []netip.Prefix {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Clone(n.routes)
	slices.SortFunc(out, netip.Prefix.Compare)
	return out
}
