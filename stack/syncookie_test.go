package stack

import (
	"bytes"
	"io"
	mrand "math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

func testID(client, server netip.AddrPort) gstack.TransportEndpointID {
	return gstack.TransportEndpointID{
		LocalAddress: tcpip.AddrFromSlice(server.Addr().AsSlice()), LocalPort: server.Port(),
		RemoteAddress: tcpip.AddrFromSlice(client.Addr().AsSlice()), RemotePort: client.Port(),
	}
}

// A cookie checks for its own 4-tuple and client ISN, in its period and
// the next, and keeps the client's MSS rounded down to the table.
func TestCookieValidInvalidExpired(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	j := newCookieJar()
	j.now = func() time.Time { return now }
	id := testID(client4, server4)
	c, kept := j.make(id, 1000, 1400)
	if kept != 1220 {
		t.Errorf("MSS 1400 kept as %d, want 1220", kept)
	}
	if mss, ok := j.check(id, 1000, c); !ok || mss != 1220 {
		t.Fatalf("own cookie: mss %d ok %v", mss, ok)
	}
	other := testID(netip.AddrPortFrom(client4.Addr(), client4.Port()+1), server4)
	for name, bad := range map[string]func() bool{
		"other ISN":   func() bool { _, ok := j.check(id, 1001, c); return ok },
		"other tuple": func() bool { _, ok := j.check(other, 1000, c); return ok },
		"flipped bit": func() bool { _, ok := j.check(id, 1000, c^1<<5); return ok },
		"other MSS":   func() bool { _, ok := j.check(id, 1000, c^1<<28); return ok },
		"other key":   func() bool { k := newCookieJar(); k.now = j.now; _, ok := k.check(id, 1000, c); return ok },
	} {
		if bad() {
			t.Errorf("%s: cookie accepted", name)
		}
	}
	now = now.Add(cookiePeriod)
	if _, ok := j.check(id, 1000, c); !ok {
		t.Error("cookie refused in the next period")
	}
	now = now.Add(cookiePeriod)
	if _, ok := j.check(id, 1000, c); ok {
		t.Error("cookie accepted two periods later (expired)")
	}
	for _, tc := range []struct{ in, want uint16 }{{0, 536}, {100, 536}, {1219, 536}, {1460, 1460}, {9000, 1460}} {
		if _, got := j.make(id, 7, tc.in); got != tc.want {
			t.Errorf("MSS %d kept as %d, want %d", tc.in, got, tc.want)
		}
	}
	// Forgeries: random cookies pass about once in 2^28 tries.
	passed := 0
	for i := range 100000 {
		if _, ok := j.check(id, uint32(i), mrand.Uint32()); ok {
			passed++
		}
	}
	if passed > 1 {
		t.Errorf("%d of 100000 random cookies passed", passed)
	}
}

// csumReplace32 gives the checksum a full recomputation gives.
func TestCsumReplace32(t *testing.T) {
	for i := range 2000 {
		p := buildTCPAck(client4, server4, header.TCPFlagAck, mrand.Uint32(), mrand.Uint32(), bytes.Repeat([]byte{byte(i)}, i%50))
		seg, ok := parseSegment(p)
		if !ok {
			t.Fatal("parse")
		}
		seg.setSeq(mrand.Uint32(), false)
		seg.setAck(mrand.Uint32())
		if !checksumOK(p) {
			t.Fatalf("checksum wrong after rewrite (case %d)", i)
		}
	}
}

func checksumOK(p []byte) bool {
	seg, ok := parseSegment(p)
	if !ok {
		return false
	}
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, seg.src, seg.dst, uint16(len(seg.tcp)))
	return checksum.Checksum(seg.tcp, xsum) == 0xffff
}

// synOptions are a modern client's SYN options: MSS 1460, SACK permitted,
// timestamps, window scale 7.
var synOptions = []byte{2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7}

func synWithOptions(from, to netip.AddrPort, isn uint32) []byte {
	opts := append(append([]byte(nil), synOptions...), 0, 0, 0, 0)[:24]
	return buildSegment(tcpip.AddrFromSlice(from.Addr().AsSlice()), tcpip.AddrFromSlice(to.Addr().AsSlice()),
		from.Port(), to.Port(), isn, 0, header.TCPFlagSyn, 64240, opts)
}

// segmentsTo returns the TCP segments sent to the client, parsed.
func segmentsTo(out *captured, client netip.AddrPort) []tcpSegment {
	var segs []tcpSegment
	for _, p := range out.all() {
		if s, ok := parseSegment(p); ok && s.dst == tcpip.AddrFromSlice(client.Addr().AsSlice()) && s.tcp.DestinationPort() == client.Port() {
			segs = append(segs, s)
		}
	}
	return segs
}

// fillGuard floods spoofed SYNs until the guard is full (cookies on).
func fillGuard(t *testing.T, s *Stack) {
	t.Helper()
	spoofed(s, 66, s.guard.limit)
	if !waitFor(10*time.Second, s.guard.full) {
		t.Fatalf("the guard did not fill: %+v", s.Stats())
	}
}

// Without a flood a SYN is gVisor's: its SYN-ACK offers window scaling,
// SACK and timestamps, and no cookie is sent.
func TestNoCookieWithoutFlood(t *testing.T) {
	out := &captured{}
	s, _ := synFloodStack(t, out)
	s.Inject(synWithOptions(client4, server4, 5000))
	var sa tcpSegment
	if !waitFor(10*time.Second, func() bool {
		segs := segmentsTo(out, client4)
		if len(segs) > 0 {
			sa = segs[0]
		}
		return len(segs) > 0
	}) {
		t.Fatal("no SYN-ACK")
	}
	o := header.ParseSynOptions(sa.tcp.Options(), true)
	if o.WS < 0 || !o.SACKPermitted || !o.TS {
		t.Errorf("gVisor's SYN-ACK options %+v, want WS, SACK and TS", o)
	}
	if st := s.Stats(); st.CookiesSent != 0 {
		t.Errorf("%d cookies sent without a flood", st.CookiesSent)
	}
}

// Under a flood a real client is answered by a cookie (MSS only); its ACK
// opens the connection in gVisor, and data crosses both ways with every
// segment in the cookie's sequence space and valid checksums.
func TestCookieConnectionTranslates(t *testing.T) {
	for _, tc := range []struct {
		name           string
		client, server netip.AddrPort
		mss            uint16
	}{{"IPv4", client4, server4, 1400 - 40}, {"IPv6", client6, server6, 1400 - 60}} {
		t.Run(tc.name, func(t *testing.T) { cookieConnection(t, tc.client, tc.server, tc.mss) })
	}
}

func cookieConnection(t *testing.T, client, server netip.AddrPort, ourMSS uint16) {
	out := &captured{}
	conns := make(chan *Conn, 1)
	s, err := New(Config{MTU: 1400, MaxInFlight: 64, Output: out.output, Logger: testLogger(),
		HandleTCP: func(r *TCPRequest) {
			go func() {
				if c, err := r.Accept(); err == nil {
					if r.Src == client {
						conns <- c
					} else {
						c.Close()
					}
				}
			}()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	fillGuard(t, s)

	const isn = 777000
	s.Inject(synWithOptions(client, server, isn))
	var sa tcpSegment
	if !waitFor(10*time.Second, func() bool {
		segs := segmentsTo(out, client)
		if len(segs) > 0 {
			sa = segs[0]
		}
		return len(segs) > 0
	}) {
		t.Fatalf("no SYN-ACK: %+v", s.Stats())
	}
	if sa.tcp.Flags() != header.TCPFlagSyn|header.TCPFlagAck || sa.tcp.AckNumber() != isn+1 {
		t.Fatalf("SYN-ACK flags %v ack %d", sa.tcp.Flags(), sa.tcp.AckNumber())
	}
	o := header.ParseSynOptions(sa.tcp.Options(), true)
	if o.WS >= 0 || o.SACKPermitted || o.TS || o.MSS != ourMSS {
		t.Errorf("cookie SYN-ACK options %+v, want MSS %d only", o, ourMSS)
	}
	cookie := sa.tcp.SequenceNumber()
	if mss, ok := s.cookies.check(testID(client, server), isn, cookie); !ok || mss != 1460 {
		t.Fatalf("SYN-ACK's sequence number is no cookie (mss %d)", mss)
	}
	// The ACK and data right behind it.
	s.Inject(buildTCPAck(client, server, header.TCPFlagAck, isn+1, cookie+1, nil))
	s.Inject(buildTCPAck(client, server, header.TCPFlagAck|header.TCPFlagPsh, isn+1, cookie+1, []byte("hello")))
	var c *Conn
	select {
	case c = <-conns:
	case <-time.After(hangGuard):
		t.Fatalf("the cookie's connection was not accepted: %+v", s.Stats())
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, err := c.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	var data tcpSegment
	if !waitFor(10*time.Second, func() bool {
		for _, sg := range segmentsTo(out, client) {
			if len(sg.tcp.Payload()) > 0 {
				data = sg
				return true
			}
		}
		return false
	}) {
		t.Fatal("no data to the client")
	}
	if data.tcp.SequenceNumber() != cookie+1 || data.tcp.AckNumber() != isn+6 || string(data.tcp.Payload()) != "world" {
		t.Errorf("data seq %d (want %d) ack %d (want %d) %q", data.tcp.SequenceNumber(), cookie+1, data.tcp.AckNumber(), isn+6, data.tcp.Payload())
	}
	for _, sg := range segmentsTo(out, client)[1:] {
		if sg.tcp.Flags()&header.TCPFlagSyn != 0 {
			t.Errorf("gVisor's own SYN-ACK reached the client")
		}
	}
	for _, p := range out.all() {
		if !checksumOK(p) {
			t.Errorf("a segment left with a bad checksum")
		}
	}
	// The client's ACK of "world", in the cookie's space, reaches gVisor:
	// the data is not sent again, and a close sends FIN at cookie+6.
	s.Inject(buildTCPAck(client, server, header.TCPFlagAck, isn+6, cookie+6, nil))
	c.CloseWrite()
	var fin tcpSegment
	if !waitFor(10*time.Second, func() bool {
		for _, sg := range segmentsTo(out, client) {
			if sg.tcp.Flags()&header.TCPFlagFin != 0 {
				fin = sg
				return true
			}
		}
		return false
	}) {
		t.Fatal("no FIN")
	}
	if fin.tcp.SequenceNumber() != cookie+6 {
		t.Errorf("FIN seq %d, want %d", fin.tcp.SequenceNumber(), cookie+6)
	}
	if st := s.Stats(); st.CookiesAccepted != 1 {
		t.Errorf("%d connections by cookie, want 1", st.CookiesAccepted)
	}
}

// An ACK with a wrong cookie opens nothing: it is counted, and gVisor
// answers it with RST as any stray segment.
func TestCookieInvalidACKRefused(t *testing.T) {
	out := &captured{}
	s, accepted := synFloodStack(t, out)
	fillGuard(t, s)
	s.Inject(synWithOptions(client4, server4, 1))
	if !waitFor(10*time.Second, func() bool { return len(segmentsTo(out, client4)) > 0 }) {
		t.Fatal("no SYN-ACK")
	}
	cookie := segmentsTo(out, client4)[0].tcp.SequenceNumber()
	s.Inject(buildTCPAck(client4, server4, header.TCPFlagAck, 2, cookie+2, nil))
	if !waitFor(10*time.Second, func() bool {
		for _, sg := range segmentsTo(out, client4) {
			if sg.tcp.Flags()&header.TCPFlagRst != 0 {
				return true
			}
		}
		return false
	}) {
		t.Fatal("no RST for a bad cookie")
	}
	if st := s.Stats(); st.CookiesRejected != 1 || st.CookiesAccepted != 0 {
		t.Errorf("rejected %d accepted %d, want 1 and 0", st.CookiesRejected, st.CookiesAccepted)
	}
	select {
	case src := <-accepted:
		if src == client4 {
			t.Error("a bad cookie opened a connection")
		}
	default:
	}
}

// FuzzCookiePath: any bytes from the TUN or from gVisor through the
// cookie paths, with a cookie flow in every state, never panic.
func FuzzCookiePath(f *testing.F) {
	f.Add(buildTCPAck(client4, server4, header.TCPFlagAck, 2, 3, []byte("x")), true)
	f.Add(buildTCPAck(server4, client4, header.TCPFlagSyn|header.TCPFlagAck, 2, 3, nil), false)
	f.Add(synWithOptions(client6, server6, 9), true)
	f.Add([]byte{0x45, 0, 0, 20}, true)
	s, err := New(Config{MTU: 1400, Output: func([][]byte, int) error { return nil }, Logger: testLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	s.cookieStat.lastSent.Store(time.Now().UnixNano())
	f.Fuzz(func(t *testing.T, pkt []byte, in bool) {
		if seg, ok := parseSegment(pkt); ok {
			if off := int(seg.tcp.DataOffset()); off < header.TCPMinimumSize || off > len(seg.tcp) {
				t.Fatalf("parsed with data offset %d of %d bytes", off, len(seg.tcp))
			}
			// Give the packet's 4-tuple a flow, ready or not.
			id := seg.inbound()
			if !in {
				id = seg.outbound()
			}
			s.cflows.mu.Lock()
			if s.cflows.m == nil {
				s.cflows.m = map[gstack.TransportEndpointID]*cookieFlow{}
			}
			if _, had := s.cflows.m[id]; !had {
				s.cflows.m[id] = &cookieFlow{cookie: 5, isn: 9, ready: len(pkt)%2 == 0, born: time.Now()}
				if len(pkt)%2 != 0 {
					s.cflows.pending++
				}
				s.cflows.n.Store(int64(len(s.cflows.m)))
			}
			s.cflows.mu.Unlock()
		}
		p := append([]byte(nil), pkt...)
		if in {
			s.Inject(p)
		} else {
			s.cookieOut(p, len(pkt)%3 == 0)
		}
	})
}

// cookieStack is a stack under a SYN flood (cookies on) whose handler
// holds every request until the test answers it.
func cookieStack(t *testing.T, out *captured, bufferMemory int64) (*Stack, chan *TCPRequest) {
	t.Helper()
	reqs := make(chan *TCPRequest, 1024)
	s, err := New(Config{MTU: 1400, MaxInFlight: 64, Output: out.output, Logger: testLogger(), BufferMemory: bufferMemory,
		HandleTCP: func(r *TCPRequest) { reqs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // refuses the requests still held
	fillGuard(t, s)
	return s, reqs
}

// cookieFor sends client's SYN and returns the cookie its SYN-ACK carries.
func cookieFor(t *testing.T, s *Stack, out *captured, client, server netip.AddrPort, isn uint32) uint32 {
	t.Helper()
	s.Inject(synWithOptions(client, server, isn))
	var segs []tcpSegment
	if !waitFor(10*time.Second, func() bool { segs = segmentsTo(out, client); return len(segs) > 0 }) {
		t.Fatalf("%v: no SYN-ACK: %+v", client, s.Stats())
	}
	return segs[0].tcp.SequenceNumber()
}

// heldBytes sums the packets the cookie flows hold.
func heldBytes(s *Stack) (n int64) {
	t := &s.cflows
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, f := range t.m {
		for _, p := range f.held {
			n += int64(len(p))
		}
	}
	return n
}

// TestCookieHeldBounded: the packets held for cookie connections whose
// handshake waits (the handler holds its request) take at most their
// share of the buffer budget, whatever the clients send: 16 clients each
// sending their ACK with 16 KB and 7 more such segments (2 MB held before
// the bound) fill a 1 MiB budget's 64 KiB and no more; the rest is dropped
// and counted.
func TestCookieHeldBounded(t *testing.T) {
	const budget = 1 << 20
	out := &captured{}
	s, _ := cookieStack(t, out, budget)
	payload := make([]byte, 16<<10)
	for i := range 16 {
		client := netip.AddrPortFrom(client4.Addr(), uint16(30000+i))
		const isn = 5000
		cookie := cookieFor(t, s, out, client, server4, isn)
		for k := range cookieHeld {
			s.Inject(buildTCPAck(client, server4, header.TCPFlagAck, isn+1+uint32(k*len(payload)), cookie+1, payload))
			if h := heldBytes(s); h > budget/cookieHeldShare {
				t.Fatalf("client %d, segment %d: %d bytes held, the share is %d", i, k, h, budget/cookieHeldShare)
			}
		}
	}
	st := s.Stats()
	t.Logf("held %d bytes (share %d); cookie connections %d, drops %d", heldBytes(s), budget/cookieHeldShare, st.CookiesAccepted, st.CookieDrops)
	if heldBytes(s) == 0 || st.CookieDrops == 0 {
		t.Errorf("held %d bytes, dropped %d: want the share filled and the rest dropped", heldBytes(s), st.CookieDrops)
	}
}

// TestCookieFlowOutlivesItsWait: a cookie connection whose request the
// handler holds longer than a replayed handshake may take (the tunnel
// waits up to 5 s and two RTTs for an association) keeps its flow: once
// accepted, the client gets data in the cookie's sequence space and no
// stray SYN-ACK; once refused, an RST it takes. Before, the flow was
// forgotten after 5 s and both went out in gVisor's own sequence space.
func TestCookieFlowOutlivesItsWait(t *testing.T) {
	out := &captured{}
	s, reqs := cookieStack(t, out, 0)
	s.cflows.mu.Lock()
	s.cflows.pendFor = 10 * time.Millisecond // the wait, shortened
	s.cflows.mu.Unlock()
	const isn = 9000
	open := func(port uint16) (netip.AddrPort, uint32, *TCPRequest) {
		client := netip.AddrPortFrom(client4.Addr(), port)
		cookie := cookieFor(t, s, out, client, server4, isn)
		// A client of a server that speaks first sends its ACK alone.
		s.Inject(buildTCPAck(client, server4, header.TCPFlagAck, isn+1, cookie+1, nil))
		for {
			select {
			case r := <-reqs:
				if r.Src != client {
					r.Refuse() // the flood's
					continue
				}
				return client, cookie, r
			case <-time.After(hangGuard):
				t.Fatalf("%v: no request for the cookie connection: %+v", client, s.Stats())
			}
		}
	}
	// Both wait longer than a replay may take, and a sweep comes.
	c1, cookie1, r1 := open(31001)
	c2, cookie2, r2 := open(31002)
	time.Sleep(50 * time.Millisecond)
	s.cflows.lastSweep.Store(0)
	s.sweep()

	conn, err := r1.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	r2.Refuse()
	var data, rst bool
	if !waitFor(10*time.Second, func() bool {
		data, rst = false, false
		for _, sg := range segmentsTo(out, c1)[1:] {
			if sg.tcp.Flags()&header.TCPFlagSyn != 0 {
				t.Fatalf("a second SYN-ACK reached the client (seq %d, cookie %d)", sg.tcp.SequenceNumber(), cookie1)
			}
			if len(sg.tcp.Payload()) > 0 {
				if sg.tcp.SequenceNumber() != cookie1+1 {
					t.Fatalf("data at seq %d, want %d", sg.tcp.SequenceNumber(), cookie1+1)
				}
				data = true
			}
		}
		for _, sg := range segmentsTo(out, c2)[1:] {
			if sg.tcp.Flags()&header.TCPFlagRst != 0 {
				if sg.tcp.SequenceNumber() != cookie2+1 {
					t.Fatalf("RST at seq %d, want %d (the client's next expected)", sg.tcp.SequenceNumber(), cookie2+1)
				}
				rst = true
			}
		}
		return data && rst
	}) {
		t.Errorf("accepted client got data: %v; refused client got an RST: %v", data, rst)
	}
}
