package peers

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestCounterCrossesAuthenticated: the caller's counter comes back with
// the packet, in as few header bytes as its size allows, and any change
// to a header byte fails authentication.
func TestCounterCrossesAuthenticated(t *testing.T) {
	s, a, b := pair(t, Options{})
	s.connect(a, b)
	pa := a.peer(t, "b")
	id := b.est[0].Session
	msg := []byte("packet")
	for _, tc := range []struct {
		counter uint64
		header  int
	}{
		{0, 5}, {1<<24 - 1, 5}, {1 << 24, 6}, {1<<32 - 1, 6}, {1 << 32, 8}, {MaxCounter, 8},
	} {
		out, _, err := pa.SealOn(id, tc.counter, msg, make([]byte, len(msg)+Overhead))
		if err != nil {
			t.Fatalf("counter %d: %v", tc.counter, err)
		}
		if len(out) != tc.header+len(msg)+TagLen || HeaderLen(tc.counter) != tc.header {
			t.Errorf("counter %d: %d-byte datagram, want a %d-byte header", tc.counter, len(out), tc.header)
		}
		for i := range tc.header {
			bad := append([]byte(nil), out...)
			bad[i] ^= 0x01
			if r, err := s.receive(b, a.addr, bad); err == nil || r.Data != nil {
				t.Errorf("counter %d: header byte %d changed, yet accepted (%v)", tc.counter, i, err)
			}
		}
		r, err := s.receive(b, a.addr, out)
		if err != nil || string(r.Data) != string(msg) || r.Counter != tc.counter {
			t.Fatalf("counter %d: received %q counter %d, %v", tc.counter, r.Data, r.Counter, err)
		}
	}
}

// TestCounterNeverRepeats: a session refuses a counter not above every one
// it sealed, and one beyond MaxCounter, so no nonce repeats under its key
// whatever the caller does; a refusal costs nothing.
func TestCounterNeverRepeats(t *testing.T) {
	s, a, b := pair(t, Options{})
	s.connect(a, b)
	pa := a.peer(t, "b")
	id := b.est[0].Session
	buf := make([]byte, 64)
	seal := func(c uint64) error {
		_, _, err := pa.SealOn(id, c, []byte("x"), buf)
		return err
	}
	if err := seal(10); err != nil {
		t.Fatal(err)
	}
	for _, c := range []uint64{10, 9, 0} {
		if err := seal(c); !errors.Is(err, ErrCounter) {
			t.Errorf("counter %d after 10: %v, want ErrCounter", c, err)
		}
	}
	if err := seal(MaxCounter + 1); !errors.Is(err, ErrCounter) {
		t.Errorf("counter beyond MaxCounter: %v, want ErrCounter", err)
	}
	if err := seal(11); err != nil {
		t.Errorf("counter 11 after refusals: %v", err)
	}
	// Seal takes the next counter after the caller's.
	out, _, err := pa.Seal([]byte("y"), buf)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.receive(b, a.addr, out); err != nil || r.Counter != 12 {
		t.Errorf("Seal after 11: counter %d, %v; want 12", r.Counter, err)
	}
}

// TestKeepaliveOnce: the keepalive that confirms a session is accepted
// once; a replay of it is refused and does not move the peer's endpoint.
func TestKeepaliveOnce(t *testing.T) {
	s, a, b := pair(t, Options{})
	var ka []byte
	s.drop = func(from, to netip.AddrPort, data []byte) bool {
		if len(data) == keepaliveLen && data[0]&transportBit != 0 {
			ka = append([]byte(nil), data...)
		}
		return false
	}
	s.connect(a, b)
	if ka == nil || b.dev.Stats().KeepalivesRx != 1 {
		t.Fatalf("keepalive %x, b took %d", ka, b.dev.Stats().KeepalivesRx)
	}
	attacker := netip.MustParseAddrPort("198.18.0.66:666")
	r, err := s.receive(b, attacker, ka)
	if !errors.Is(err, ErrReplay) || r.EndpointChanged || b.peer(t, "a").Endpoint() == attacker {
		t.Fatalf("replayed keepalive: %+v %v", r, err)
	}
}

// TestIndexTableFull: with every 13-bit index taken, a handshake fails
// cleanly on either side (counted), and works again once some are free.
func TestIndexTableFull(t *testing.T) {
	s, a, b := pair(t, Options{})
	fill := func(n *node) {
		n.dev.idxMu.Lock()
		for i := range uint32(MaxIndices) {
			n.dev.index[i] = indexEntry{full: i | 1<<20, sess: &session{}}
		}
		n.dev.idxMu.Unlock()
	}
	fill(a)
	if _, _, err := a.peer(t, "b").Initiate(); !errors.Is(err, ErrIndexFull) {
		t.Fatalf("initiation with a full table: %v", err)
	}
	free := func(n *node) {
		n.dev.idxMu.Lock()
		for i := range uint32(MaxIndices / 2) {
			delete(n.dev.index, i)
		}
		n.dev.idxMu.Unlock()
	}
	fill(b)
	free(a)
	s.initiate(a, b)
	s.deliverDue()
	if got := b.dev.Stats().Drops["index_full"]; got != 1 || b.peer(t, "a").HasSession() {
		t.Fatalf("responder with a full table: %d index_full drops, session %v", got, b.peer(t, "a").HasSession())
	}
	free(b)
	s.clk.Advance(5 * time.Second)
	s.initiate(a, b)
	s.deliverDue()
	if !a.peer(t, "b").HasSession() || !b.peer(t, "a").HasSession() {
		t.Fatal("no session once indices were free")
	}
}
