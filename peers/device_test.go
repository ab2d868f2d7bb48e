package peers

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestHandshakeCarriesPayloadsAndTransport(t *testing.T) {
	s, a, b := pair(t, Options{})
	s.connect(a, b)
	if len(a.est) != 1 || string(a.est[0].RemotePayload) != "params b->a" {
		t.Fatalf("a: established %d: %+v", len(a.est), a.est)
	}
	if len(b.est) != 1 || string(b.est[0].RemotePayload) != "params a->b" {
		t.Fatalf("b: established %d results %+v", len(b.est), b.est)
	}
	if a.est[0].Peer.Name() != "b" || b.est[0].Peer.Name() != "a" {
		t.Fatalf("established with wrong peers")
	}
	for i := range 10 {
		msg := bytes.Repeat([]byte{byte(i)}, 100*i)
		if err := s.seal(a, "b", msg); err != nil {
			t.Fatal(err)
		}
		if err := s.seal(b, "a", append(msg, 'x')); err != nil {
			t.Fatal(err)
		}
	}
	s.deliverDue()
	// i == 0 is an empty plaintext from a: empty data (only a keepalive,
	// which peers sends itself, is not data).
	if len(b.data) != 10 || len(a.data) != 10 {
		t.Fatalf("received %d at b, %d at a", len(b.data), len(a.data))
	}
	for i := range 10 {
		if !bytes.Equal(b.data[i], bytes.Repeat([]byte{byte(i)}, 100*i)) {
			t.Fatalf("b got wrong data #%d", i)
		}
	}
	if len(a.errs)+len(b.errs) != 0 {
		t.Fatalf("errors: %v %v", a.errs, b.errs)
	}
	st := b.dev.Stats()
	if st.RxPackets != 11 || st.KeepalivesRx != 1 || st.TotalDrops() != 0 || st.HandshakesCompleted != 1 {
		t.Fatalf("b stats %+v", st)
	}
	for _, n := range []*node{a, b} {
		for _, p := range n.dev.Peers() {
			if p.Handshakes() != 1 {
				t.Errorf("%s's peer %s: %d handshakes, want 1", n.name, p.Name(), p.Handshakes())
			}
		}
	}
}

func TestHandshakeWrongKeys(t *testing.T) {
	t.Run("initiator has wrong responder key", func(t *testing.T) {
		s := newSim(t, 0)
		wrong := cfgFor("b", "198.51.100.2:4000")
		wrong.PublicKey = testKey("not b").PublicKey()
		a := s.addNode("a", "192.0.2.1:4000", Options{}, wrong)
		b := s.addNode("b", "198.51.100.2:4000", Options{}, cfgFor("a", "192.0.2.1:4000"))
		s.initiate(a, b)
		s.deliverDue()
		if len(b.errs) != 1 || !errors.Is(b.errs[0], ErrBadMAC) || b.replies != 0 {
			t.Fatalf("b: errs %v replies %d, want one ErrBadMAC and no reply", b.errs, b.replies)
		}
		// Even with a MAC that matches b's key, the Noise message was
		// encrypted to another static key and must not authenticate.
		dg, _, _ := a.peer(t, "b").Initiate()
		s.clk.Advance(5 * time.Second)
		dg, ok, err := a.peer(t, "b").Initiate()
		if !ok || err != nil {
			t.Fatalf("retransmit: %v %v", ok, err)
		}
		remac(dg.Data, b.dev.pub)
		s.send(a.addr, dg)
		s.deliverDue()
		if len(b.errs) != 2 || !errors.Is(b.errs[1], ErrHandshakeAuth) || b.replies != 0 {
			t.Fatalf("b: errs %v replies %d, want ErrHandshakeAuth and no reply", b.errs, b.replies)
		}
		if a.peer(t, "b").HasSession() || b.peer(t, "a").HasSession() {
			t.Fatal("session despite wrong key")
		}
	})
	t.Run("responder does not know initiator key", func(t *testing.T) {
		s := newSim(t, 0)
		a := s.addNode("a", "192.0.2.1:4000", Options{}, cfgFor("b", "198.51.100.2:4000"))
		b := s.addNode("b", "198.51.100.2:4000", Options{}, cfgFor("c", "192.0.2.1:4000"))
		s.initiate(a, b)
		s.deliverDue()
		if len(b.errs) != 1 || !errors.Is(b.errs[0], ErrUnknownPeer) || b.replies != 0 {
			t.Fatalf("b: errs %v replies %d, want ErrUnknownPeer and no reply", b.errs, b.replies)
		}
		if b.dev.Stats().Drops["unknown_peer"] != 1 {
			t.Fatalf("unknown_peer not counted: %v", b.dev.Stats().Drops)
		}
	})
	t.Run("response does not authenticate", func(t *testing.T) {
		s, a, b := pair(t, Options{})
		s.drop = func(from, to netip.AddrPort, data []byte) bool { return data[0] == typeResponse }
		s.initiate(a, b)
		s.deliverDue()
		var resp []byte
		s.drop = func(from, to netip.AddrPort, data []byte) bool {
			if data[0] == typeResponse {
				resp = bytes.Clone(data)
				return true
			}
			return false
		}
		s.clk.Advance(5 * time.Second)
		s.initiate(a, b)
		s.deliverDue()
		if resp == nil || resp[0] != typeResponse {
			t.Fatalf("no response captured")
		}
		s.drop = nil
		resp[40] ^= 1 // inside the responder's ephemeral key
		remac(resp, a.dev.pub)
		r, err := s.receive(a, b.addr, resp)
		if !errors.Is(err, ErrHandshakeAuth) || r.Established || len(r.Send) != 0 {
			t.Fatalf("tampered response: %+v, %v", r, err)
		}
		if a.peer(t, "b").HasSession() {
			t.Fatal("session from tampered response")
		}
	})
}

// remac rewrites the MAC1 of a handshake message for the holder of pub, as
// an attacker who knows pub can (an initiation's mac2 after it is left as
// it is).
func remac(pkt []byte, pub Key) {
	k := mac1Key(pub)
	end := len(pkt)
	if pkt[0] == typeInitiation {
		end -= macLen
	}
	m := computeMAC1(&k, pkt[:end-macLen])
	copy(pkt[end-macLen:end], m[:])
}

// sealed seals msg from n to peer and returns the datagram without sending.
func sealed(t testing.TB, n *node, peer string, msg []byte) []byte {
	t.Helper()
	out, _, err := n.peer(t, peer).Seal(msg, make([]byte, len(msg)+Overhead))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReplayRejected(t *testing.T) {
	s, a, b := pair(t, Options{})
	s.connect(a, b)
	var pkts [][]byte
	for i := range 50 {
		pkts = append(pkts, sealed(t, a, "b", []byte(fmt.Sprint("packet ", i))))
	}
	for _, p := range pkts {
		if _, err := s.receive(b, a.addr, p); err != nil {
			t.Fatal(err)
		}
	}
	before := b.dev.Stats().Drops["replay"]
	for i, p := range pkts {
		r, err := s.receive(b, a.addr, p)
		if !errors.Is(err, ErrReplay) || r.Data != nil {
			t.Fatalf("replay of packet %d: %v", i, err)
		}
	}
	if got := b.dev.Stats().Drops["replay"] - before; got != 50 {
		t.Fatalf("replay drops = %d, want 50", got)
	}
	if len(b.data) != 50 {
		t.Fatalf("delivered %d packets, want 50", len(b.data))
	}
}

func TestReorderWithinWindow(t *testing.T) {
	s, a, b := pair(t, Options{})
	s.connect(a, b)
	const n = 1500
	pkts := make([][]byte, n)
	for i := range pkts {
		pkts[i] = sealed(t, a, "b", []byte(fmt.Sprint(i)))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(pkts), func(i, j int) { pkts[i], pkts[j] = pkts[j], pkts[i] })
	for _, p := range pkts {
		if _, err := s.receive(b, a.addr, p); err != nil {
			t.Fatalf("reordered packet rejected: %v", err)
		}
	}
	// Move the window far ahead; the oldest packet falls out, one just
	// inside it is still accepted once.
	var late [][]byte
	for range ReplayWindow + 10 {
		late = append(late, sealed(t, a, "b", []byte("x")))
	}
	if _, err := s.receive(b, a.addr, late[len(late)-1]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.receive(b, a.addr, late[0]); !errors.Is(err, ErrReplay) {
		t.Fatalf("packet older than the window: %v, want ErrReplay", err)
	}
	inside := late[len(late)-ReplayWindow+5]
	if _, err := s.receive(b, a.addr, inside); err != nil {
		t.Fatalf("packet inside the window: %v", err)
	}
	if _, err := s.receive(b, a.addr, inside); !errors.Is(err, ErrReplay) {
		t.Fatalf("second copy: %v, want ErrReplay", err)
	}
}

// TestRekeyUnderTraffic runs both directions at 50 packets/s over a 600 ms
// RTT for many rekey periods and checks every packet arrives exactly once.
func TestRekeyUnderTraffic(t *testing.T) {
	opts := Options{RekeyAfterTime: 10 * time.Second}
	s := newSim(t, 300*time.Millisecond)
	a := s.addNode("a", "192.0.2.1:4000", opts, cfgFor("b", "198.51.100.2:4000"))
	b := s.addNode("b", "198.51.100.2:4000", opts, cfgFor("a", "192.0.2.1:4000"))
	s.initiate(a, b)
	s.run(time.Second, 10*time.Millisecond)
	if !a.peer(t, "b").HasSession() || !b.peer(t, "a").HasSession() {
		t.Fatal("no initial session")
	}
	sentA, sentB := 0, 0
	dur := 120 * time.Second
	if testing.Short() {
		dur = 40 * time.Second
	}
	for end := s.clk.Now().Add(dur); s.clk.Now().Before(end); {
		if err := s.seal(a, "b", []byte(fmt.Sprint("a", sentA))); err != nil {
			t.Fatalf("a seal at %v: %v", s.clk.Now(), err)
		}
		sentA++
		if err := s.seal(b, "a", []byte(fmt.Sprint("b", sentB))); err != nil {
			t.Fatalf("b seal at %v: %v", s.clk.Now(), err)
		}
		sentB++
		s.step(20 * time.Millisecond)
	}
	s.run(time.Second, 10*time.Millisecond)
	check := func(n *node, prefix string, sent int) {
		seen := map[string]bool{}
		for _, d := range n.data {
			if seen[string(d)] {
				t.Errorf("%s: duplicate %s", n.name, d)
			}
			seen[string(d)] = true
		}
		for i := range sent {
			if !seen[fmt.Sprint(prefix, i)] {
				t.Errorf("%s: lost packet %s%d", n.name, prefix, i)
				return
			}
		}
		if len(n.errs) != 0 {
			t.Errorf("%s: errors %v", n.name, n.errs)
		}
	}
	check(b, "a", sentA)
	check(a, "b", sentB)
	rekeys := int(dur/(10*time.Second)) - 1
	if len(a.est) < rekeys || len(b.est) < rekeys {
		t.Errorf("established %d / %d times, want at least %d rekeys", len(a.est), len(b.est), rekeys)
	}
	for _, n := range []*node{a, b} {
		for _, r := range n.est {
			if !strings.HasPrefix(string(r.RemotePayload), "params ") {
				t.Errorf("%s: payload %q on rekey", n.name, r.RemotePayload)
			}
		}
	}
	// Sessions are rotated, not accumulated.
	if st := a.dev.Stats(); st.Sessions > 3 {
		t.Errorf("a holds %d index entries", st.Sessions)
	}
}

// sameSession checks that a sends on the session b receives with as current.
func sameSession(t *testing.T, a, b *node) {
	t.Helper()
	sa := a.peer(t, b.name).current.Load()
	sb := b.peer(t, a.name).current.Load()
	if sa == nil || sb == nil || sa.remote != sb.local || sb.remote != sa.local {
		t.Fatalf("sessions do not match: %+v / %+v", sa, sb)
	}
}

func TestSimultaneousInitiationConverges(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dropFirst string // node whose first initiation is lost
	}{{"both arrive", ""}, {"lower key's first lost", "low"}, {"higher key's first lost", "high"}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 300*time.Millisecond)
			a := s.addNode("a", "192.0.2.1:4000", Options{}, cfgFor("b", "198.51.100.2:4000"))
			b := s.addNode("b", "198.51.100.2:4000", Options{}, cfgFor("a", "192.0.2.1:4000"))
			low, high := a, b
			if b.dev.pub.less(a.dev.pub) {
				low, high = b, a
			}
			var victim *node
			switch tc.dropFirst {
			case "low":
				victim = low
			case "high":
				victim = high
			}
			dropped := false
			s.drop = func(from, to netip.AddrPort, data []byte) bool {
				if victim != nil && !dropped && from == victim.addr && data[0] == typeInitiation {
					dropped = true
					return true
				}
				return false
			}
			s.initiate(a, b)
			s.initiate(b, a)
			s.run(8*time.Second, 10*time.Millisecond)
			if !a.peer(t, "b").HasSession() || !b.peer(t, "a").HasSession() {
				t.Fatal("no session")
			}
			sameSession(t, a, b)
			if len(a.est) != 1 || len(b.est) != 1 {
				t.Fatalf("established %d / %d times, want exactly one handshake", len(a.est), len(b.est))
			}
			if err := s.seal(a, "b", []byte("hello")); err != nil {
				t.Fatal(err)
			}
			if err := s.seal(b, "a", []byte("hi")); err != nil {
				t.Fatal(err)
			}
			s.run(time.Second, 10*time.Millisecond)
			if len(a.data) != 1 || len(b.data) != 1 {
				t.Fatalf("data after convergence: %d / %d", len(a.data), len(b.data))
			}
			if tc.dropFirst == "" && low.dev.Stats().HandshakeCollisions != 1 {
				t.Fatalf("collision not counted: %+v", low.dev.Stats())
			}
		})
	}
}

// TestHandshakeLongRTT: with a 3 s RTT the response to the first
// initiation arrives after two retransmissions; it must still complete.
func TestHandshakeLongRTT(t *testing.T) {
	s := newSim(t, 1500*time.Millisecond)
	a := s.addNode("a", "192.0.2.1:4000", Options{}, cfgFor("b", "198.51.100.2:4000"))
	b := s.addNode("b", "198.51.100.2:4000", Options{}, cfgFor("a", "192.0.2.1:4000"))
	s.initiate(a, b)
	s.run(5*time.Second, 10*time.Millisecond)
	if !a.peer(t, "b").HasSession() || !b.peer(t, "a").HasSession() {
		t.Fatalf("no session: a errs %v b errs %v", a.errs, b.errs)
	}
	sameSession(t, a, b)
	if st := a.dev.Stats(); st.InitiationsSent < 2 {
		t.Fatalf("expected retransmissions before the response, sent %d", st.InitiationsSent)
	}
}

func TestRetransmitScheduleAndGiveUp(t *testing.T) {
	s := newSim(t, 0)
	opts := Options{HandshakeAttemptTime: 20 * time.Second}
	a := s.addNode("a", "192.0.2.1:4000", opts, cfgFor("b", "198.51.100.2:4000"))
	s.drop = func(_, _ netip.AddrPort, _ []byte) bool { return true }
	var times []time.Time
	start := s.clk.Now()
	dg, ok, err := a.peer(t, "b").Initiate()
	if !ok || err != nil || dg.To != netip.MustParseAddrPort("198.51.100.2:4000") {
		t.Fatalf("Initiate: %v %v %v", dg.To, ok, err)
	}
	times = append(times, s.clk.Now())
	// Initiate again at once: rate-limited inside.
	if _, ok, _ := a.peer(t, "b").Initiate(); ok {
		t.Fatal("second Initiate produced an initiation immediately")
	}
	for s.clk.Now().Sub(start) < 30*time.Second {
		s.clk.Advance(50 * time.Millisecond)
		for range a.dev.Tick() {
			times = append(times, s.clk.Now())
		}
	}
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second}
	for i, w := range want {
		got := times[i+1].Sub(times[i])
		if got < w || got > w+w/5+50*time.Millisecond {
			t.Errorf("retransmission %d after %v, want %v..%v", i+1, got, w, w+w/5)
		}
	}
	if last := times[len(times)-1].Sub(start); last > 20*time.Second {
		t.Errorf("retransmitted at %v, after the 20 s attempt time", last)
	}
	if st := a.dev.Stats(); st.HandshakeTimeouts != 1 || st.Sessions != 0 {
		t.Errorf("after giving up: timeouts %d, index entries %d", st.HandshakeTimeouts, st.Sessions)
	}
	if _, ok, err := a.peer(t, "b").Initiate(); !ok || err != nil {
		t.Errorf("Initiate after giving up: %v %v", ok, err)
	}
}

func TestStaleInitiationIgnored(t *testing.T) {
	s, a, b := pair(t, Options{})
	dg, _, _ := a.peer(t, "b").Initiate()
	captured := bytes.Clone(dg.Data)
	s.send(a.addr, dg)
	s.deliverDue()
	if !b.peer(t, "a").HasSession() {
		t.Fatal("no session")
	}
	before := b.replies
	for _, src := range []string{"192.0.2.1:4000", "203.0.113.9:999"} {
		r, err := s.receive(b, netip.MustParseAddrPort(src), captured)
		if !errors.Is(err, ErrStaleInitiation) || len(r.Send) != 0 {
			t.Fatalf("replayed initiation: %+v %v", r, err)
		}
	}
	if b.replies != before || b.peer(t, "a").Endpoint() != a.addr {
		t.Fatalf("replayed initiation answered or moved the endpoint")
	}
}

func TestSetPeers(t *testing.T) {
	s := newSim(t, 0)
	b := s.addNode("b", "198.51.100.2:4000", Options{},
		cfgFor("a", "192.0.2.1:4000", "10.1.0.0/16"), cfgFor("c", "192.0.2.3:4000", "10.3.0.0/16"))
	a := s.addNode("a", "192.0.2.1:4000", Options{}, cfgFor("b", "198.51.100.2:4000"))
	c := s.addNode("c", "192.0.2.3:4000", Options{}, cfgFor("b", "198.51.100.2:4000"))
	s.connect(a, b)
	s.connect(c, b)
	oldA := b.peer(t, "a")
	pending := sealed(t, a, "b", []byte("in flight"))

	// Remove a, keep c unchanged.
	if err := b.dev.SetPeers([]PeerConfig{cfgFor("c", "192.0.2.3:4000", "10.3.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.receive(b, a.addr, pending); !errors.Is(err, ErrUnknownIndex) {
		t.Fatalf("packet of removed peer: %v, want ErrUnknownIndex", err)
	}
	if _, _, err := oldA.Seal([]byte("x"), make([]byte, 64)); !errors.Is(err, ErrPeerRemoved) {
		t.Fatalf("Seal on removed peer: %v", err)
	}
	if _, ok := b.dev.Lookup(netip.MustParseAddr("10.1.2.3")); ok {
		t.Fatal("removed peer's subnet still routed")
	}
	if _, ok := b.dev.Peer("a"); ok {
		t.Fatal("removed peer still listed")
	}
	s.clk.Advance(time.Second)
	a.peer(t, "b").rekeyWanted.Store(true)
	s.initiate(a, b)
	s.deliverDue()
	if last := b.errs[len(b.errs)-1]; !errors.Is(last, ErrUnknownPeer) {
		t.Fatalf("initiation from removed peer: %v", last)
	}
	// c is untouched: same handle, same session.
	if p := b.peer(t, "c"); !p.HasSession() {
		t.Fatal("unchanged peer lost its session")
	}
	if err := s.seal(c, "b", []byte("still here")); err != nil {
		t.Fatal(err)
	}
	s.deliverDue()
	if got := string(b.data[len(b.data)-1]); got != "still here" {
		t.Fatalf("unchanged peer's data: %q", got)
	}

	// Change c's key: its session goes, a handshake is due.
	newC := cfgFor("c", "192.0.2.3:4000", "10.3.0.0/16")
	newC.PublicKey = testKey("c2").PublicKey()
	if err := b.dev.SetPeers([]PeerConfig{newC}); err != nil {
		t.Fatal(err)
	}
	pc := b.peer(t, "c")
	if pc.HasSession() {
		t.Fatal("session kept across a key change")
	}
	if _, _, err := pc.Seal([]byte("x"), make([]byte, 64)); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Seal after key change: %v, want ErrNoSession", err)
	}
	if _, ok, err := pc.Initiate(); !ok || err != nil {
		t.Fatalf("Initiate after key change: %v %v", ok, err)
	}
	if err := s.seal(c, "b", []byte("old key")); err != nil {
		t.Fatal(err)
	}
	s.deliverDue()
	if last := b.errs[len(b.errs)-1]; !errors.Is(last, ErrUnknownIndex) {
		t.Fatalf("packet on old key's session: %v", last)
	}
	if st := b.dev.Stats(); st.Sessions != 1 { // only the new initiation
		t.Fatalf("index entries after reconfiguration: %d", st.Sessions)
	}
}

func TestSetPeersRejects(t *testing.T) {
	self := testKey("self")
	d, err := NewDevice(self, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	lowOrder := Key{} // a point of small order other than zero
	lowOrder[0] = 1
	for _, tc := range []struct {
		name  string
		peers []PeerConfig
		want  string
	}{
		{"identical subnets", []PeerConfig{cfgFor("a", "192.0.2.1:1", "10.0.0.0/8"), cfgFor("b", "192.0.2.2:1", "10.1.2.3/8")},
			`subnet 10.0.0.0/8 is claimed by both peer "a" and peer "b"`},
		{"identical v6 subnets", []PeerConfig{cfgFor("a", "192.0.2.1:1", "fd00::/64"), cfgFor("b", "192.0.2.2:1", "fd00::1/64")},
			`subnet fd00::/64 is claimed by both`},
		{"duplicate name", []PeerConfig{cfgFor("a", "192.0.2.1:1"), cfgFor("a", "192.0.2.2:1")}, `peer "a" is configured twice`},
		{"duplicate key", []PeerConfig{cfgFor("a", "192.0.2.1:1"), {Name: "b", PublicKey: testKey("a").PublicKey()}}, "same public key"},
		{"own key", []PeerConfig{{Name: "me", PublicKey: self.PublicKey()}}, "our own public key"},
		{"no name", []PeerConfig{{PublicKey: testKey("x").PublicKey()}}, "no name"},
		{"zero key", []PeerConfig{{Name: "z"}}, "all zeros"},
		{"low order key", []PeerConfig{{Name: "lo", PublicKey: lowOrder}}, "not usable"},
		{"zero port", []PeerConfig{{Name: "p", PublicKey: testKey("p").PublicKey(), Endpoint: netip.MustParseAddrPort("192.0.2.1:0")}}, "non-zero address and port"},
	} {
		err := d.SetPeers(tc.peers)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if cerr := d.CheckPeers(tc.peers); cerr == nil || err == nil || cerr.Error() != err.Error() {
			t.Errorf("%s: CheckPeers says %v, SetPeers %v", tc.name, cerr, err)
		}
	}
	// Nested subnets across peers are fine: longest prefix wins.
	nested := []PeerConfig{cfgFor("a", "192.0.2.1:1", "10.0.0.0/8"), cfgFor("b", "192.0.2.2:1", "10.1.0.0/16")}
	if err := d.CheckPeers(nested); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Peers()); n != 0 {
		t.Fatalf("CheckPeers changed the peer set: %d peers", n)
	}
	if err := d.SetPeers(nested); err != nil {
		t.Fatal(err)
	}
}

func TestLookupLongestPrefix(t *testing.T) {
	d, err := NewDevice(testKey("self"), []PeerConfig{
		cfgFor("wide", "192.0.2.1:1", "10.0.0.0/8", "0.0.0.0/0"),
		cfgFor("site", "192.0.2.2:1", "10.1.0.0/16", "fd00:1::/48"),
		cfgFor("host", "192.0.2.3:1", "10.1.2.3/32", "fd00:1:0:5::/64", "fd00::/16"),
		cfgFor("v6default", "192.0.2.4:1", "::/0"),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ addr, want string }{
		{"10.1.2.3", "host"},
		{"10.1.2.4", "site"},
		{"10.2.0.1", "wide"},
		{"192.168.1.1", "wide"},
		{"::ffff:10.1.2.3", "host"},
		{"fd00:1:0:5::9", "host"},
		{"fd00:1:0:6::9", "site"},
		{"fd00:2::1", "host"},
		{"2001:db8::1", "v6default"},
		{"fe80::1%eth0", "v6default"},
	} {
		p, ok := d.Lookup(netip.MustParseAddr(tc.addr))
		if !ok || p.Name() != tc.want {
			t.Errorf("Lookup(%s) = %v, %v; want %s", tc.addr, p, ok, tc.want)
		}
	}
	d2, _ := NewDevice(testKey("self"), []PeerConfig{cfgFor("a", "192.0.2.1:1", "10.1.0.0/16")}, Options{})
	for _, a := range []string{"10.2.0.1", "fd00::1"} {
		if p, ok := d2.Lookup(netip.MustParseAddr(a)); ok {
			t.Errorf("Lookup(%s) = %s, want no match", a, p.Name())
		}
	}
	if _, ok := d2.Lookup(netip.Addr{}); ok {
		t.Error("Lookup of the zero Addr matched")
	}
}

func TestRoamingFollowsOnlyAuthenticatedPackets(t *testing.T) {
	s, a, b := pair(t, Options{})
	s.connect(a, b)
	pb := b.peer(t, "a")
	moved := netip.MustParseAddrPort("203.0.113.7:5555")
	early := sealed(t, a, "b", []byte("early"))
	genuine := sealed(t, a, "b", []byte("from the new address"))
	r, err := s.receive(b, moved, genuine)
	if err != nil || !r.EndpointChanged || pb.Endpoint() != moved {
		t.Fatalf("authenticated packet from new address: %+v %v, endpoint %v", r, err, pb.Endpoint())
	}
	// b now answers at the new address.
	if _, ep, err := pb.Seal([]byte("reply"), make([]byte, 64)); err != nil || ep != moved {
		t.Fatalf("Seal goes to %v, %v", ep, err)
	}

	attacker := netip.MustParseAddrPort("198.18.0.66:666")
	// Forged: right header, garbage ciphertext.
	forged := bytes.Clone(genuine)
	h, err := decodeTransport(genuine)
	if err != nil {
		t.Fatal(err)
	}
	putTransportHeader(forged, h.receiver, 1000, false)
	for i := HeaderLen(1000); i < len(forged); i++ {
		forged[i] ^= 0x5a
	}
	if r, err := s.receive(b, attacker, forged); !errors.Is(err, ErrAuth) || r.EndpointChanged {
		t.Fatalf("forged packet: %+v %v", r, err)
	}
	// Replayed genuine packet from the attacker's address.
	if r, err := s.receive(b, attacker, genuine); !errors.Is(err, ErrReplay) || r.EndpointChanged {
		t.Fatalf("replayed packet: %+v %v", r, err)
	}
	// A late but genuine packet from the old address is accepted but does
	// not pull the endpoint back.
	if r, err := s.receive(b, a.addr, early); err != nil || r.EndpointChanged {
		t.Fatalf("reordered packet from old address: %+v %v", r, err)
	}
	if pb.Endpoint() != moved {
		t.Fatalf("endpoint %v, want %v", pb.Endpoint(), moved)
	}
	if got := b.dev.Stats().EndpointChanges; got != 1 {
		t.Fatalf("endpoint changes = %d, want 1", got)
	}
}

// TestGarbageIsDroppedSilently feeds random, truncated and bit-flipped
// datagrams of every kind and checks each is counted and unanswered.
func TestGarbageIsDroppedSilently(t *testing.T) {
	s, a, b := pair(t, Options{HandshakeRatePerSource: 1e6, HandshakeRateGlobal: 1e6})
	s.connect(a, b)
	var valid [][]byte
	valid = append(valid, sealed(t, a, "b", bytes.Repeat([]byte("data"), 50)))
	valid = append(valid, sealed(t, a, "b", nil))
	s.clk.Advance(10 * time.Second) // let a start another handshake
	a.peer(t, "b").rekeyWanted.Store(true)
	dg, ok, err := a.peer(t, "b").Initiate()
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	valid = append(valid, dg.Data)
	// A response: answer an initiation from a, then keep the reply.
	s.clk.Advance(2 * time.Second)
	a.peer(t, "b").rekeyWanted.Store(true)
	dg2, _, _ := a.peer(t, "b").Initiate()
	r, err := b.dev.Receive(a.addr, dg2.Data, nil)
	if err != nil || len(r.Send) != 1 {
		t.Fatalf("response: %v", err)
	}
	valid = append(valid, r.Send[0].Data)

	rng := rand.New(rand.NewPCG(3, 4))
	var inputs [][]byte
	for n := range 200 {
		g := make([]byte, n*8)
		for i := range g {
			g[i] = byte(rng.Uint32())
		}
		if len(g) > 0 {
			g[0] = []byte{0, 1, 2, 3, 4, 5, 255}[n%7]
		}
		inputs = append(inputs, g)
	}
	for _, v := range valid {
		for cut := 0; cut < len(v); cut++ {
			inputs = append(inputs, bytes.Clone(v[:cut]))
		}
		for i := range v {
			for _, bit := range []byte{1, 0x80} {
				f := bytes.Clone(v)
				f[i] ^= bit
				inputs = append(inputs, f)
			}
		}
	}
	for _, target := range []*node{a, b} {
		before := target.dev.Stats()
		for i, in := range inputs {
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 9)
			r, err := target.dev.Receive(src, in, make([]byte, 2048))
			if err == nil || len(r.Send) != 0 || r.Data != nil || r.Established || r.Peer != nil {
				t.Fatalf("%s: input %d (%x...) accepted: %+v %v", target.name, i, in[:min(len(in), 16)], r, err)
			}
		}
		after := target.dev.Stats()
		if got := after.TotalDrops() - before.TotalDrops(); got != uint64(len(inputs)) {
			t.Errorf("%s: %d drops counted for %d inputs", target.name, got, len(inputs))
		}
		if after.RxPackets != before.RxPackets {
			t.Errorf("%s: garbage counted as received", target.name)
		}
		t.Logf("%s drops: %v", target.name, after.Drops)
	}
}

func TestRateLimitHandshakes(t *testing.T) {
	s, a, b := pair(t, Options{RateLimitSources: 64})
	// Junk with a valid MAC costs DH work; it must be throttled per source.
	junk := make([]byte, initMinLen+20)
	junk[0] = typeInitiation
	remac(junk, b.dev.pub)
	src := netip.MustParseAddrPort("198.18.0.1:1")
	var auth, limited int
	for range 100 {
		_, err := s.receive(b, src, junk)
		switch {
		case errors.Is(err, ErrHandshakeAuth):
			auth++
		case errors.Is(err, ErrRateLimited):
			limited++
		default:
			t.Fatalf("unexpected %v", err)
		}
	}
	if auth != 10 || limited != 90 {
		t.Fatalf("processed %d, limited %d; want burst of 10", auth, limited)
	}
	s.clk.Advance(time.Second)
	if _, err := s.receive(b, src, junk); !errors.Is(err, ErrHandshakeAuth) {
		t.Fatalf("after refill: %v", err)
	}
	// Many sources: the table stays bounded.
	for i := range 1000 {
		s.receive(b, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 1), junk)
	}
	if n := b.dev.Stats().RateLimitEntries; n > 64 {
		t.Fatalf("rate limiter holds %d sources, bound 64", n)
	}
	// A real peer still gets through once the flood stops.
	s.clk.Advance(2 * time.Second)
	b.dev.Tick()
	s.connect(a, b)
}

func TestSealOpenBuffers(t *testing.T) {
	s, a, b := pair(t, Options{})
	s.connect(a, b)
	pa := a.peer(t, "b")
	msg := []byte("in place please")
	// In place: plaintext already at dst[HeaderLen:] (the counters of this
	// test all take the shortest header).
	hl := HeaderLen(0)
	buf := make([]byte, hl+len(msg)+TagLen)
	copy(buf[hl:], msg)
	out, _, err := pa.Seal(buf[hl:hl+len(msg)], buf)
	if err != nil || len(out) != len(msg)+OverheadFor(0) {
		t.Fatalf("in-place Seal: %d %v", len(out), err)
	}
	r, err := b.dev.Receive(a.addr, out, out[hl:])
	if err != nil || string(r.Data) != string(msg) {
		t.Fatalf("in-place Open: %q %v", r.Data, err)
	}
	if _, _, err := pa.Seal(msg, make([]byte, len(msg)+OverheadFor(0)-1)); !errors.Is(err, ErrBufferTooSmall) {
		t.Fatalf("short dst: %v", err)
	}
	big := make([]byte, 100)
	if _, _, err := pa.Seal(big[3:40], big); !errors.Is(err, ErrBufferOverlap) {
		t.Fatalf("overlapping buffers: %v", err)
	}
	pkt := sealed(t, a, "b", msg)
	if _, err := b.dev.Receive(a.addr, pkt, make([]byte, 3)); !errors.Is(err, ErrBufferTooSmall) {
		t.Fatalf("short receive dst: %v", err)
	}
	// The failed attempt must not burn the counter.
	if r, err := b.dev.Receive(a.addr, pkt, nil); err == nil || r.Data != nil {
		t.Fatalf("nil dst accepted")
	}
	if r, err := b.dev.Receive(a.addr, pkt, make([]byte, len(msg))); err != nil || string(r.Data) != string(msg) {
		t.Fatalf("retry with room: %v", err)
	}
}

func TestSessionExpiresAndRekeysByMessages(t *testing.T) {
	s, a, b := pair(t, Options{RekeyAfterMessages: 5})
	s.connect(a, b)
	pa := a.peer(t, "b")
	for range 5 {
		if err := s.seal(a, "b", []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	if !pa.rekeyWanted.Load() {
		t.Fatal("message limit did not ask for a rekey")
	}
	s.step(10 * time.Millisecond)
	if len(a.est) != 2 {
		t.Fatalf("established %d times, want a rekey", len(a.est))
	}
	// Expiry: no traffic, no rekey possible (peer unreachable).
	s.drop = func(_, _ netip.AddrPort, _ []byte) bool { return true }
	s.run(181*time.Second, 500*time.Millisecond)
	if pa.HasSession() {
		t.Fatal("session alive after RejectAfterTime")
	}
	// The rekey attempt started at 120 s gives up after 90 s more.
	s.run(30*time.Second, 500*time.Millisecond)
	if pa.HasSession() {
		t.Fatal("session alive after RejectAfterTime")
	}
	if _, _, err := pa.Seal([]byte("x"), make([]byte, 64)); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Seal on expired session: %v", err)
	}
	if st := a.dev.Stats(); st.Sessions != 0 {
		t.Fatalf("%d index entries after expiry", st.Sessions)
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{
		{RekeyAfterTime: time.Minute, RejectAfterTime: time.Minute},
		{HandshakeRetransmit: 5 * time.Second, HandshakeRetransmitMax: time.Second},
		{HandshakeAttemptTime: time.Second},
	} {
		if _, err := NewDevice(testKey("x"), nil, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := NewDevice(Key{}, nil, Options{}); err == nil {
		t.Error("zero private key accepted")
	}
	d, err := NewDevice(testKey("x"), []PeerConfig{cfgFor("y", "192.0.2.1:1")},
		Options{Payload: func(string) []byte { return make([]byte, MaxHandshakePayload+1) }})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := d.Peer("y")
	if _, _, err := p.Initiate(); !errors.Is(err, ErrPayloadTooLarge) {
		t.Errorf("oversized payload: %v", err)
	}
	if st := d.Stats(); st.Sessions != 0 {
		t.Errorf("failed initiation left %d index entries", st.Sessions)
	}
}

// TestHandshakeRTT: both ends learn the handshake's round trip, the
// initiator from the response, the responder from the first packet on
// the session (the keepalive that confirms it).
func TestHandshakeRTT(t *testing.T) {
	s := newSim(t, 300*time.Millisecond)
	a := s.addNode("a", "192.0.2.1:4000", Options{}, cfgFor("b", "198.51.100.2:4000", "10.2.0.0/16"))
	b := s.addNode("b", "198.51.100.2:4000", Options{}, cfgFor("a", "192.0.2.1:4000", "10.1.0.0/16"))
	s.initiate(a, b)
	s.run(2*time.Second, 10*time.Millisecond)
	if len(a.est) != 1 || len(b.est) != 1 {
		t.Fatalf("established %d at a, %d at b", len(a.est), len(b.est))
	}
	for _, r := range []Result{a.est[0], b.est[0]} {
		if r.HandshakeRTT < 600*time.Millisecond || r.HandshakeRTT > 620*time.Millisecond {
			t.Errorf("%s: handshake RTT %v, want 600 ms", r.Peer.Name(), r.HandshakeRTT)
		}
	}
}
