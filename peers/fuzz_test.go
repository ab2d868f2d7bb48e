package peers

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/flynn/noise"
)

// FuzzReceive throws arbitrary datagrams from arbitrary sources at a device
// that has an established session. Nothing but the genuine seeds may
// produce data or replies, nothing may panic, and state stays bounded.
func FuzzReceive(f *testing.F) {
	s, a, b := pair(f, Options{RateLimitSources: 32})
	// Every fuzz worker process must build the same genuine packets.
	a.dev.entropy = rand.NewChaCha8([32]byte{1})
	b.dev.entropy = rand.NewChaCha8([32]byte{2})
	s.connect(a, b)
	genuine := [][]byte{
		sealed(f, a, "b", []byte("genuine transport")),
		sealed(f, a, "b", nil),
	}
	a.peer(f, "b").rekeyWanted.Store(true)
	dg, _, err := a.peer(f, "b").Initiate()
	if err != nil {
		f.Fatal(err)
	}
	genuine = append(genuine, dg.Data)
	// b's own initiation to a, answered by a cookie reply from a loaded a.
	b.peer(f, "a").rekeyWanted.Store(true)
	bdg, _, err := b.peer(f, "a").Initiate()
	if err != nil {
		f.Fatal(err)
	}
	a.dev.cookies.rand = rand.NewChaCha8([32]byte{4})
	m, err := decodeInitiation(bdg.Data)
	if err != nil {
		f.Fatal(err)
	}
	genuine = append(genuine, a.dev.cookies.reply(b.addr, m.mac1))
	for _, g := range genuine {
		f.Add([]byte{192, 0, 2, 1, 0x0f, 0xa0}, g)
		f.Add([]byte{203, 0, 113, 5, 0, 1}, g[:len(g)/2])
	}
	f.Add([]byte{}, []byte{})
	f.Add([]byte{1, 2, 3, 4, 5, 6}, []byte{transportBit | 1<<counterShift, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 3, 4, 5, 6}, append([]byte{typeInitiation}, make([]byte, initMinLen)...))
	f.Add([]byte{1, 2, 3, 4, 5, 6}, append([]byte{typeResponse}, make([]byte, respMinLen)...))

	dst := make([]byte, 70000)
	f.Fuzz(func(t *testing.T, srcb []byte, pkt []byte) {
		var a4 [4]byte
		copy(a4[:], srcb)
		var port uint16 = 1
		if len(srcb) >= 6 {
			port = binary.BigEndian.Uint16(srcb[4:6])
		}
		src := netip.AddrPortFrom(netip.AddrFrom4(a4), port)
		r, err := b.dev.Receive(src, pkt, dst)
		isGenuine := false
		for _, g := range genuine {
			isGenuine = isGenuine || bytes.Equal(g, pkt)
		}
		// The fuzzer's cache also holds initiations that earlier builds
		// made for b's key. Any of them may earn a cookie under load
		// (mac1 is keyed by b's public key, as in WireGuard); one that
		// Noise authenticates as a's may be answered like a's own.
		cookieOnly := len(r.Send) == 1 && r.Send[0].To == src && len(r.Send[0].Data) > 0 &&
			r.Send[0].Data[0] == typeCookieReply && r.Data == nil && !r.Established && r.Peer == nil
		if !isGenuine && !(cookieOnly && validMAC1(b, pkt)) && !authenticInitiation(t, b, pkt, a) &&
			(err == nil || len(r.Send) > 0 || r.Data != nil || r.Established || r.Peer != nil) {
			t.Fatalf("unauthenticated input accepted: %+v, %v", r, err)
		}
		if err != nil && (len(r.Send) > 0 || r.Data != nil) {
			t.Fatalf("error %v with output %+v", err, r)
		}
		st := b.dev.Stats()
		if st.Sessions > 2+maxPending+maxInitiations {
			t.Fatalf("index table grew to %d", st.Sessions)
		}
		if st.RateLimitEntries > 32 {
			t.Fatalf("rate limiter grew to %d", st.RateLimitEntries)
		}
	})
}

// validMAC1 reports whether pkt is an initiation whose mac1 is right for
// n's public key, which anyone who knows that key can compute.
func validMAC1(n *node, pkt []byte) bool {
	m, err := decodeInitiation(pkt)
	return err == nil && checkMAC1(&n.dev.mac1, m.mac1d, m.mac1)
}

// authenticInitiation reports whether pkt is an initiation to n that Noise
// authenticates as from's: only from's private key can make one.
func authenticInitiation(t *testing.T, n *node, pkt []byte, from *node) bool {
	m, err := decodeInitiation(pkt)
	if err != nil {
		return false
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite: cipherSuite, Pattern: noise.HandshakeIK, Prologue: prologue, StaticKeypair: n.dev.static,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := hs.ReadMessage(nil, m.noiseMsg); err != nil {
		return false
	}
	return bytes.Equal(hs.PeerStatic(), from.dev.static.Public)
}

func FuzzDecodeTransport(f *testing.F) {
	for code := range byte(4) {
		f.Add(append([]byte{transportBit | code<<counterShift | 0x1f, 0xff}, make([]byte, 6+TagLen)...))
	}
	f.Add(make([]byte, keepaliveLen))
	f.Add([]byte{transportBit})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		h, err := decodeTransport(pkt)
		var code byte
		hl := 0
		if len(pkt) > 0 {
			code = pkt[0] >> counterShift & 3
			hl = transportFixed + counterLens[code]
		}
		valid := len(pkt) >= transportFixed && pkt[0]&transportBit != 0 && len(pkt) >= hl+TagLen && (code != 0 || len(pkt) == keepaliveLen)
		if err != nil {
			if valid {
				t.Fatalf("valid layout rejected")
			}
			return
		}
		if !valid {
			t.Fatalf("invalid layout accepted: %+v", h)
		}
		if h.receiver > indexMask || h.keepalive != (code == 0) || len(h.header) != hl || len(h.sealed) != len(pkt)-hl {
			t.Fatalf("fields out of range: %+v", h)
		}
		// The shortest form is what putTransportHeader writes back.
		if h.keepalive || counterCode(h.counter) == code {
			b := make([]byte, hl)
			if n := putTransportHeader(b, h.receiver, h.counter, h.keepalive); n != hl || !bytes.Equal(b, pkt[:hl]) {
				t.Fatalf("header does not round-trip: %x -> %+v -> %x", pkt[:hl], h, b[:n])
			}
		}
	})
}

func FuzzDecodeInitiation(f *testing.F) {
	f.Add(append([]byte{typeInitiation}, make([]byte, initMinLen-1)...))
	f.Add([]byte{typeInitiation, 0})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		m, err := decodeInitiation(pkt)
		if err != nil {
			if len(pkt) >= initMinLen && len(pkt) <= initMaxLen && pkt[0] == typeInitiation {
				t.Fatalf("valid layout rejected")
			}
			return
		}
		if len(m.mac1) != macLen || len(m.mac2) != macLen || len(m.mac2d)+macLen != len(pkt) || len(m.mac1d)+macLen != len(m.mac2d) ||
			len(m.noiseMsg)+1 != len(m.mac1d) || len(pkt) < initMinLen || len(pkt) > initMaxLen {
			t.Fatalf("bad split of %d bytes: %d %d %d", len(pkt), len(m.noiseMsg), len(m.mac1d), len(m.mac2d))
		}
		if !bytes.Equal(m.mac2d, pkt[:len(m.mac2d)]) || !bytes.Equal(m.mac1, pkt[len(m.mac1d):len(m.mac2d)]) {
			t.Fatalf("MACs do not cover what they should")
		}
	})
}

// FuzzCookieReply: the decoder splits exactly the one valid length, and a
// reply opens only with the right key and the mac1 it answers.
func FuzzCookieReply(f *testing.F) {
	clk := newClock()
	jar := newCookieJar(clk.Now, testKey("b").PublicKey())
	jar.rand = rand.NewChaCha8([32]byte{3}) // the same secret in every fuzz worker
	key := cookieKey(testKey("b").PublicKey())
	mac1 := bytes.Repeat([]byte{7}, macLen)
	f.Add(jar.reply(netip.MustParseAddrPort("192.0.2.1:4700"), mac1))
	f.Add([]byte{typeCookieReply, 1, 2})
	f.Add(append([]byte{typeCookieReply}, make([]byte, cookieReplyLen-1)...))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		m1, nonce, sealed, err := decodeCookieReply(pkt)
		if err != nil {
			if len(pkt) == cookieReplyLen && pkt[0] == typeCookieReply {
				t.Fatalf("valid layout rejected")
			}
			return
		}
		if len(m1) != macLen || len(nonce) != xNonceLen || len(sealed) != cookieLen+aeadTag {
			t.Fatalf("bad split: %d %d %d", len(m1), len(nonce), len(sealed))
		}
		c, ok := openCookieReply(&key, nonce, sealed, m1)
		if !ok {
			return
		}
		// Only a reply the jar made opens: its cookie is the one for the
		// seed's address and it answered the seed's mac1.
		cur, _ := jar.secrets()
		if !bytes.Equal(m1, mac1) || c != cookie(&cur, netip.MustParseAddrPort("192.0.2.1:4700")) {
			t.Fatalf("forged cookie reply opened: %x", c)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(append([]byte{typeResponse}, make([]byte, respMinLen-1)...))
	f.Add([]byte{typeResponse, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		recv, msg, macd, mac, err := decodeResponse(pkt)
		if err != nil {
			return
		}
		if recv != binary.LittleEndian.Uint32(pkt[1:5]) || len(mac) != macLen || len(msg)+1+idxLen+macLen != len(pkt) || len(macd)+macLen != len(pkt) {
			t.Fatalf("bad split of %d bytes", len(pkt))
		}
	})
}

func FuzzDecodeHandshakePayloads(f *testing.F) {
	f.Add(initPayload{sender: 7, timestamp: 99, blob: []byte("params")}.appendTo(nil))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if ip, err := decodeInitPayload(b); err == nil {
			if !bytes.Equal(ip.appendTo(nil), b) {
				t.Fatalf("initiation payload does not round-trip")
			}
		} else if len(b) >= initPayloadHeader && len(b) <= initPayloadHeader+MaxHandshakePayload {
			t.Fatalf("valid initiation payload rejected")
		}
		if rp, err := decodeRespPayload(b); err == nil {
			if !bytes.Equal(rp.appendTo(nil), b) {
				t.Fatalf("response payload does not round-trip")
			}
		} else if len(b) >= respPayloadHeader && len(b) <= respPayloadHeader+MaxHandshakePayload {
			t.Fatalf("valid response payload rejected")
		}
	})
}

// FuzzReplayWindow checks the ring bitmap against a plain set: a counter is
// fresh iff never seen and less than ReplayWindow behind the highest.
func FuzzReplayWindow(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 0})
	f.Add([]byte{0xff, 0x7f, 0, 0, 0xff, 0x7f, 3, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var w replayWindow
		seen := map[uint64]bool{}
		var hi uint64
		base := uint64(1 << 20)
		for i := 0; i+1 < len(ops); i += 2 {
			// Signed 16-bit steps around a moving base exercise jumps,
			// reordering and wrap of the ring.
			delta := int64(int16(binary.LittleEndian.Uint16(ops[i:])))
			c := uint64(int64(base) + delta)
			if delta > 0 {
				base += uint64(delta) / 2
			}
			want := !seen[c] && (len(seen) == 0 || c > hi || hi-c < ReplayWindow)
			if got := w.check(c); got != want {
				t.Fatalf("check(%d) = %v, want %v (hi %d)", c, got, want, hi)
			}
			if got := w.update(c); got != want {
				t.Fatalf("update(%d) = %v, want %v (hi %d)", c, got, want, hi)
			}
			if want {
				seen[c] = true
				hi = max(hi, c)
			}
		}
	})
}
