package peers

// Test harness: a virtual clock and a simulated network with a fixed
// one-way delay, optional drop filter, and nodes that record what their
// device reported.

import (
	"bytes"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type node struct {
	name string
	priv Key
	addr netip.AddrPort
	dev  *Device

	data    [][]byte // received association packets
	est     []Result // Established results
	errs    []error
	replies int // datagrams the device asked to send in answer to input
}

type inflight struct {
	at       time.Time
	seq      int
	from, to netip.AddrPort
	data     []byte
}

type sim struct {
	t      testing.TB
	clk    *fakeClock
	delay  time.Duration
	nodes  map[netip.AddrPort]*node
	queue  []inflight
	seq    int
	drop   func(from, to netip.AddrPort, data []byte) bool
	sent   int
	onRecv func(n *node, r Result, err error)
	// counter numbers the packets sealOn sends, as an association's packet
	// numbers would (one count for all sessions: each sees it grow).
	counter uint64
}

func newSim(t testing.TB, delay time.Duration) *sim {
	return &sim{t: t, clk: newClock(), delay: delay, nodes: map[netip.AddrPort]*node{}}
}

// testKey derives a deterministic private key from a name.
func testKey(name string) Key {
	var k Key
	copy(k[:], fmt.Sprintf("test private key of %-20s", name))
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
	return k
}

func payloadFunc(self string) func(string) []byte {
	return func(peer string) []byte { return []byte("params " + self + "->" + peer) }
}

// addNode creates a node whose peers are the named other nodes (created
// later or earlier; configs refer to keys derived from names).
func (s *sim) addNode(name string, addr string, opts Options, peers ...PeerConfig) *node {
	s.t.Helper()
	n := &node{name: name, priv: testKey(name), addr: netip.MustParseAddrPort(addr)}
	opts.Now = s.clk.Now
	if opts.Payload == nil {
		opts.Payload = payloadFunc(name)
	}
	d, err := NewDevice(n.priv, peers, opts)
	if err != nil {
		s.t.Fatalf("NewDevice(%s): %v", name, err)
	}
	n.dev = d
	s.nodes[n.addr] = n
	return n
}

func peerOf(n *node, subnets ...string) PeerConfig {
	pc := PeerConfig{Name: n.name, PublicKey: n.priv.PublicKey(), Endpoint: n.addr}
	for _, sn := range subnets {
		pc.Subnets = append(pc.Subnets, netip.MustParsePrefix(sn))
	}
	return pc
}

func cfgFor(name, addr string, subnets ...string) PeerConfig {
	return peerOf(&node{name: name, priv: testKey(name), addr: netip.MustParseAddrPort(addr)}, subnets...)
}

func (s *sim) send(from netip.AddrPort, dg Datagram) {
	s.seq++
	s.sent++
	s.queue = append(s.queue, inflight{at: s.clk.Now().Add(s.delay), seq: s.seq, from: from, to: dg.To, data: bytes.Clone(dg.Data)})
}

// deliverDue delivers every datagram due by now, including replies with
// zero delay.
func (s *sim) deliverDue() {
	for {
		now := s.clk.Now()
		sort.SliceStable(s.queue, func(i, j int) bool {
			if !s.queue[i].at.Equal(s.queue[j].at) {
				return s.queue[i].at.Before(s.queue[j].at)
			}
			return s.queue[i].seq < s.queue[j].seq
		})
		if len(s.queue) == 0 || s.queue[0].at.After(now) {
			return
		}
		p := s.queue[0]
		s.queue = s.queue[1:]
		if s.drop != nil && s.drop(p.from, p.to, p.data) {
			continue
		}
		n := s.nodes[p.to]
		if n == nil {
			continue
		}
		s.receive(n, p.from, p.data)
	}
}

func (s *sim) receive(n *node, from netip.AddrPort, data []byte) (Result, error) {
	buf := make([]byte, len(data))
	r, err := n.dev.Receive(from, data, buf)
	if err != nil {
		n.errs = append(n.errs, err)
		if len(r.Send) > 0 || r.Data != nil || r.Peer != nil {
			s.t.Errorf("%s: Receive failed (%v) yet returned %+v", n.name, err, r)
		}
	}
	if r.Data != nil {
		// The tunnel queues dst itself as the packet (tunnel.rxBuf).
		if len(r.Data) > 0 && &r.Data[0] != &buf[0] {
			s.t.Errorf("%s: Data does not begin at dst[0]", n.name)
		}
		n.data = append(n.data, bytes.Clone(r.Data))
	}
	if r.Established {
		n.est = append(n.est, r)
	}
	n.replies += len(r.Send)
	for _, dg := range r.Send {
		s.send(n.addr, dg)
	}
	if s.onRecv != nil {
		s.onRecv(n, r, err)
	}
	return r, err
}

// step advances the clock by dt, runs every device's timers and delivers
// what is due.
func (s *sim) step(dt time.Duration) {
	s.clk.Advance(dt)
	for _, addr := range s.sortedAddrs() {
		n := s.nodes[addr]
		for _, dg := range n.dev.Tick() {
			s.send(n.addr, dg)
		}
	}
	s.deliverDue()
}

func (s *sim) sortedAddrs() []netip.AddrPort {
	var a []netip.AddrPort
	for k := range s.nodes {
		a = append(a, k)
	}
	sort.Slice(a, func(i, j int) bool { return a[i].String() < a[j].String() })
	return a
}

func (s *sim) run(d, dt time.Duration) {
	for end := s.clk.Now().Add(d); s.clk.Now().Before(end); {
		s.step(dt)
	}
}

func (n *node) peer(t testing.TB, name string) *Peer {
	t.Helper()
	p, ok := n.dev.Peer(name)
	if !ok {
		t.Fatalf("%s has no peer %s", n.name, name)
	}
	return p
}

// initiate asks from's device for an initiation to peer to and puts it on
// the wire.
func (s *sim) initiate(from *node, to *node) {
	s.t.Helper()
	dg, ok, err := from.peer(s.t, to.name).Initiate()
	if err != nil || !ok {
		s.t.Fatalf("%s.Initiate(%s) = %v, %v", from.name, to.name, ok, err)
	}
	s.send(from.addr, dg)
}

// seal seals msg from one node to a peer and puts it on the wire.
func (s *sim) seal(from *node, to string, msg []byte) error {
	buf := make([]byte, len(msg)+Overhead)
	out, ep, err := from.peer(s.t, to).Seal(msg, buf)
	if err != nil {
		return err
	}
	s.send(from.addr, Datagram{To: ep, Data: out})
	return nil
}

// pair makes nodes a and b that know each other, with zero delay.
func pair(t testing.TB, opts Options) (*sim, *node, *node) {
	s := newSim(t, 0)
	a := s.addNode("a", "192.0.2.1:4000", opts, cfgFor("b", "198.51.100.2:4000", "10.2.0.0/16"))
	b := s.addNode("b", "198.51.100.2:4000", opts, cfgFor("a", "192.0.2.1:4000", "10.1.0.0/16"))
	return s, a, b
}

// connect runs a handshake from a to b and checks it completed.
func (s *sim) connect(a, b *node) {
	s.t.Helper()
	s.initiate(a, b)
	s.deliverDue()
	if !a.peer(s.t, b.name).HasSession() || !b.peer(s.t, a.name).HasSession() {
		s.t.Fatalf("no session after handshake: a errs %v, b errs %v", a.errs, b.errs)
	}
}
