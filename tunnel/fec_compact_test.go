package tunnel

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// withIPv4Checksum sets an IPv4 packet's header checksum, as the
// kernel's are (the test packets leave it 0).
func withIPv4Checksum(p []byte) []byte {
	if p[0]>>4 == 4 {
		p[10], p[11] = 0, 0
		binary.BigEndian.PutUint16(p[10:], ^checksum(p[:20], 0))
	}
	return p
}

// TestFecCompactRoundTrip: a UDP datagram of either family, whatever its
// TOS or traffic class, TTL, identification, DF bit, flow label and
// checksum, goes as a compact frame 21 (IPv4) or 40 (IPv6) bytes shorter
// than a datagram frame, and the receiver, knowing the flow's addresses
// and ports, rebuilds the very packet; a packet it could not rebuild
// exactly (IPv4 options or a fragment, a wrong checksum, padding, not
// UDP) is refused, to go as a datagram frame.
func TestFecCompactRoundTrip(t *testing.T) {
	v4src, v4dst := netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:443")
	v6src, v6dst := netip.MustParseAddrPort("[fd00:1::7]:40000"), netip.MustParseAddrPort("[fd00:2::5]:443")
	payload := make([]byte, 1200)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name  string
		pkt   func() []byte
		ok    bool
		saved int
	}{
		{"IPv4", func() []byte {
			p := udpPacket(v4src, v4dst, payload)
			p[1], p[4], p[5], p[6], p[8] = 0x03, 0x12, 0x34, 0x40, 57 // CE, id, DF, TTL
			p[20+6], p[20+7] = 0xab, 0xcd
			return withIPv4Checksum(p)
		}, true, 21},
		{"IPv4 without DF, empty payload", func() []byte {
			p := udpPacket(v4src, v4dst, nil)
			p[1] = 0x02
			return withIPv4Checksum(p)
		}, true, 21},
		{"IPv6", func() []byte {
			p := udpPacket(v6src, v6dst, payload)
			p[0], p[1], p[2], p[3], p[7] = 0x60|0x0b, 0xa5, 0x43, 0x21, 33 // traffic class 0xba, flow label 0x54321, hop limit
			p[40+6], p[40+7] = 0x12, 0x34
			return p
		}, true, 40},
		{"IPv4, wrong checksum", func() []byte {
			p := withIPv4Checksum(udpPacket(v4src, v4dst, payload))
			p[10] ^= 1
			return p
		}, false, 0},
		{"IPv4 fragment", func() []byte {
			p := udpPacket(v4src, v4dst, payload)
			p[6], p[7] = 0x20, 0 // more fragments
			return withIPv4Checksum(p)
		}, false, 0},
		{"IPv4 options", func() []byte {
			p := udpPacket(v4src, v4dst, payload)
			q := append([]byte{}, p[:20]...)
			q[0] = 0x46
			q = append(q, 1, 1, 1, 0) // NOPs, end
			q = append(q, p[20:]...)
			binary.BigEndian.PutUint16(q[2:], uint16(len(q)))
			return withIPv4Checksum(q)
		}, false, 0},
		{"IPv4 padded past its length", func() []byte {
			return append(withIPv4Checksum(udpPacket(v4src, v4dst, payload)), 0)
		}, false, 0},
		{"TCP", func() []byte {
			return withIPv4Checksum(ipv4Packet(6, v4src.Addr().As4(), v4dst.Addr().As4(), 40))
		}, false, 0},
		{"IPv6 UDP length not the payload's", func() []byte {
			p := udpPacket(v6src, v6dst, payload)
			p[40+5]--
			return p
		}, false, 0},
	} {
		pkt := tc.pkt()
		before := []byte("prefix")
		b, ok := appendFecCompact(before, 9, 100, 5, pkt)
		if ok != tc.ok {
			t.Errorf("%s: compact %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if !ok {
			if string(b) != "prefix" {
				t.Errorf("%s: refused, but appended %x", tc.name, b[6:])
			}
			continue
		}
		fr := b[len("prefix"):]
		if got := len(appendFecData(nil, 9, 100, 5, pkt)) - len(fr); got != tc.saved {
			t.Errorf("%s: %d bytes shorter than a datagram frame, want %d", tc.name, got, tc.saved)
		}
		h, body, err := parseFec(fr)
		if err != nil || h.typ != fecCompact || h.flow != 9 || h.seq != 100 || h.index != 5 {
			t.Fatalf("%s: parsed %+v, %v", tc.name, h, err)
		}
		info, _ := parseIP(pkt)
		key, _ := compactKey(pkt, info)
		re, ok := expandCompact(key, body)
		if !ok || !bytes.Equal(re, pkt) {
			t.Errorf("%s: rebuilt %v\n%x\nwant\n%x", tc.name, ok, re, pkt)
		}
		// The other family's key rebuilds nothing.
		other := quicFlowKey{v6src, v6dst}
		if key.src.Addr().Is6() {
			other = quicFlowKey{v4src, v4dst}
		}
		if _, ok := expandCompact(other, body); ok {
			t.Errorf("%s: rebuilt with the other family's addresses", tc.name)
		}
	}
}

// FuzzExpandCompact: any compact body, for a flow of either family,
// rebuilds into a UDP packet of the flow's addresses and ports or is
// refused, never panics; and what it rebuilds goes compact again as the
// same body.
func FuzzExpandCompact(f *testing.F) {
	v4 := quicFlowKey{netip.MustParseAddrPort("10.1.0.7:40000"), netip.MustParseAddrPort("10.2.0.5:443")}
	v6 := quicFlowKey{netip.MustParseAddrPort("[fd00:1::7]:40000"), netip.MustParseAddrPort("[fd00:2::5]:443")}
	for _, k := range []quicFlowKey{v4, v6} {
		p := withIPv4Checksum(udpPacket(k.src, k.dst, []byte("quic packet")))
		b, _ := appendFecCompact(nil, 1, 2, 3, p)
		f.Add(k.src.Addr().Is6(), b[fecDataHeader:])
	}
	f.Add(false, []byte{compactDF, 0, 64, 0, 0, 0, 0})
	f.Add(true, []byte{compactIPv6 | compactDF, 0, 64, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, six bool, body []byte) {
		key := v4
		if six {
			key = v6
		}
		p, ok := expandCompact(key, body)
		if !ok {
			return
		}
		info, ok := parseIP(p)
		if !ok || info.proto != protoUDP {
			t.Fatalf("%x rebuilt %x, not a UDP packet", body, p)
		}
		if k, ok := compactKey(p, info); !ok || k != key {
			t.Fatalf("%x rebuilt %x for %v", body, p, k)
		}
		b, ok := appendFecCompact(nil, 1, 2, 3, p)
		if !ok || !bytes.Equal(b[fecDataHeader:], body) {
			t.Fatalf("%x rebuilt %x, which goes compact (%v) as %x", body, p, ok, b)
		}
	})
}

// TestQuicCompactFrames: toward a peer that takes compact frames
// (capFecCompact), a repaired flow's datagrams after its first 64 go
// compact, each block's first whole: the association sends about 21
// bytes fewer a datagram over IPv4 (parities aside), and every datagram
// arrives as it left; over a wire losing 1 % as well (the parities
// cover the packets the receiver rebuilds). Toward a peer of an older
// release (no bit), datagram frames only.
func TestQuicCompactFrames(t *testing.T) {
	h, a, b := quicSites(t, "quic = \"repair\"\n", `rtt = "2s"`)
	as := a.assoc(b).cur.Load()
	if !as.fecCompact.Load() {
		t.Fatal("the peer's handshake did not say it takes compact frames")
	}
	const n = 600
	dst := netip.MustParseAddrPort("10.2.0.5:443")
	// run sends n datagrams on a new flow (its own port) at once and
	// returns how many arrived, each checked whole.
	run := func(port uint16, what string) int {
		src := netip.AddrPortFrom(netip.MustParseAddr("10.1.0.7"), port)
		want := map[uint32][]byte{}
		for j := range n {
			p := udpPacket(src, dst, make([]byte, 1000))
			binary.BigEndian.PutUint32(p[28:], uint32(j))
			p[1], p[4], p[5], p[6], p[8] = 2, byte(j>>8), byte(j), 0x40, 60
			p[26], p[27] = byte(j*3), byte(j*5) // a UDP checksum
			want[uint32(j)] = withIPv4Checksum(p)
			a.inject(p)
		}
		got := 0
		for got < n {
			select {
			case p := <-b.datagrams:
				info, _ := parseIP(p)
				if info.src != src.Addr() {
					continue
				}
				seq := binary.BigEndian.Uint32(p[28:])
				if w := want[seq]; len(w) > 1 && p[1] == w[1]|3 {
					// Marked CE by the sender's queue (a loaded
					// machine's wait): the mark is the sender's.
					w[1] |= 3
					withIPv4Checksum(w)
				}
				if !bytes.Equal(p, want[seq]) {
					t.Fatalf("%s: datagram %d arrived as\n%x\nwant\n%x", what, seq, p, want[seq])
				}
				delete(want, seq)
				got++
			case <-time.After(2 * time.Second):
				// A block whose last datagram the wire lost tells the
				// receiver only by its parities: the flow's end.
				return got
			}
		}
		return got
	}
	// A run is a measure of the frames only if the association sent
	// every datagram once: on a clean wire, a datagram dropped unsent
	// (it waited past its age: the machine stalled the sender over
	// 100 ms) and its resend on the receiver's request are the machine's,
	// and moved the bytes by tens a datagram. Such a run is taken again.
	const attempts = 8
	port := uint16(44000)
	sent := map[bool]float64{}
	for _, compact := range []bool{false, true} {
		as.fecCompact.Store(compact)
		for attempt := 1; ; attempt++ {
			st0 := a.assoc(b).stats()
			parities, resent := a.ep.Stats().QuicParities.Load(), a.ep.Stats().QuicResent.Load()
			port++
			if got := run(port, fmt.Sprint("compact ", compact)); got != n {
				t.Fatalf("compact %v: %d of %d arrived over a clean wire", compact, got, n)
			}
			time.Sleep(3 * fecSpan) // the last block's parities
			st1 := a.assoc(b).stats()
			dropped, resent := st1.DatagramsDropped-st0.DatagramsDropped, a.ep.Stats().QuicResent.Load()-resent
			if dropped == 0 && resent == 0 {
				// A parity frame is 1041 bytes here (the longest shard's).
				parities = a.ep.Stats().QuicParities.Load() - parities
				sent[compact] = float64(st1.BytesSent-st0.BytesSent) - 1041*float64(parities)
				break
			}
			t.Logf("compact %v, run %d: %d datagrams dropped unsent, %d resent on a clean wire (a stalled machine): not a measure, again", compact, attempt, dropped, resent)
			if attempt == attempts {
				t.Fatalf("compact %v: in each of %d runs the association dropped datagrams unsent or resent some on a clean wire", compact, attempts)
			}
		}
	}
	saved := (sent[false] - sent[true]) / n
	t.Logf("association bytes for %d datagrams, their parities aside: %.0f with datagram frames, %.0f compact (%.1f fewer a datagram)", n, sent[false], sent[true], saved)
	// 21 a datagram for the 536 of 600 after the first 64, but each
	// block's first: about 17 in all; acknowledgements move a little.
	if saved < 12 || saved > 21 {
		t.Errorf("compact frames saved %.1f bytes a datagram, not 12 to 21", saved)
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(9, 10))
	h.wire.SetLoss(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return rng.IntN(100) == 0
	})
	defer h.wire.SetLoss(nil)
	if got := run(port+1, "compact over a lossy wire"); got < n-n/50 {
		t.Errorf("over a wire losing 1 %%: %d of %d arrived", got, n)
	}
}

// TestQuicRxCompact: the receiver rebuilds a flow sent in compact frames,
// in order, whatever it lost of them (from the parities, which cover the
// whole packets), once a datagram frame told it the flow's addresses;
// before that, a compact frame is as if lost.
func TestQuicRxCompact(t *testing.T) {
	frames, _ := fecFrames(5, 80, 8, 2, true)
	var st Stats
	rx := quicRx{wait: time.Second}
	now := time.Now()
	var got [][]byte
	for i, fr := range frames {
		if i%10 == 3 {
			continue // lost: one of each block's ten frames
		}
		out, _ := rx.take(&st, fr, now)
		got = append(got, out...)
	}
	if len(got) != 80 {
		t.Fatalf("%d of 80 delivered (repaired %d)", len(got), st.QuicRepaired.Load())
	}
	src, dst := netip.MustParseAddrPort("[fd00:1::7]:40000"), netip.MustParseAddrPort("[fd00:2::5]:443")
	for i, p := range got {
		want := udpPacket(src, dst, make([]byte, 20+i%50))
		binary.BigEndian.PutUint32(want[48:], uint32(i))
		if !bytes.Equal(p, want) {
			t.Fatalf("datagram %d delivered as %x, want %x", i, p, want)
		}
	}
	if st.QuicRepaired.Load() != 10 || st.TunMalformed.Load() != 0 {
		t.Errorf("repaired %d, malformed %d; want 10, 0", st.QuicRepaired.Load(), st.TunMalformed.Load())
	}
	// A flow whose first datagram frame was lost: its compact frames
	// are as if lost: more than the block's parities rebuild.
	frames, _ = fecFrames(6, 8, 8, 2, true)
	rx = quicRx{wait: time.Second}
	n := 0
	for i, fr := range frames {
		if i == 0 {
			continue
		}
		out, _ := rx.take(&st, fr, now)
		n += len(out)
	}
	if n != 0 {
		t.Errorf("%d delivered from a block of compact frames whose flow's addresses never came", n)
	}
}

// TestQuicRxCompactNewKey: a peer that restarted numbers its flows
// anew, so a flow number the receiver knows may come back for another
// 5-tuple: its datagram frames (a flow's first 64) teach the receiver
// the new addresses, and its compact frames are rebuilt with those, not
// the old flow's.
func TestQuicRxCompactNewKey(t *testing.T) {
	var st Stats
	rx := quicRx{wait: time.Second}
	now := time.Now()
	old := quicFlowKey{netip.MustParseAddrPort("[fd00:1::7]:40000"), netip.MustParseAddrPort("[fd00:2::5]:443")}
	take := func(fr []byte) [][]byte {
		out, _ := rx.take(&st, fr, now)
		return out
	}
	take(appendFecData(nil, 5, 0, 0, udpPacket(old.src, old.dst, []byte("old"))))
	// The restarted peer's flow 5, another client port, from 0 again.
	src, dst := netip.MustParseAddrPort("[fd00:1::8]:41000"), old.dst
	var got [][]byte
	for i := range 70 {
		pkt := udpPacket(src, dst, []byte(fmt.Sprint("new ", i)))
		fr, ok := appendFecCompact(nil, 5, uint32(i), i%8, pkt)
		if i < fecCompactAfter || i%8 == 0 || !ok {
			fr = appendFecData(nil, 5, uint32(i), i%8, pkt)
		}
		got = append(got, take(fr)...)
	}
	// Its 0 comes before where the old flow was (1): dropped as
	// delivered already.
	if len(got) != 69 {
		t.Fatalf("%d of 69 delivered", len(got))
	}
	for i, p := range got {
		if want := udpPacket(src, dst, []byte(fmt.Sprint("new ", i+1))); !bytes.Equal(p, want) {
			t.Fatalf("datagram %d delivered as %x, want %x", i, p, want)
		}
	}
}
