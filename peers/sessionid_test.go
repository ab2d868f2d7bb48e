package peers

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestSessionIDsAndPayloads: both ends name a handshake's session by the
// same number, report both payloads of it, and tag every transport packet
// with the session it came on; a new handshake makes a new number.
func TestSessionIDsAndPayloads(t *testing.T) {
	s, a, b := pair(t, Options{})
	s.connect(a, b)
	ea, eb := a.est[0], b.est[0]
	if ea.Session == 0 || ea.Session != eb.Session {
		t.Fatalf("session ids %x at a, %x at b: want one non-zero id", ea.Session, eb.Session)
	}
	if !bytes.Equal(ea.LocalPayload, eb.RemotePayload) || !bytes.Equal(eb.LocalPayload, ea.RemotePayload) {
		t.Errorf("payloads: a sent %q, b got %q; b sent %q, a got %q", ea.LocalPayload, eb.RemotePayload, eb.LocalPayload, ea.RemotePayload)
	}
	first := ea.Session
	var got []uint64
	s.onRecv = func(n *node, r Result, err error) {
		if n == b && r.Data != nil {
			got = append(got, r.Session)
		}
	}
	if err := s.seal(a, "b", []byte("on the first")); err != nil {
		t.Fatal(err)
	}
	s.deliverDue()

	// Not while the handshake that just completed is being taken in.
	if _, ok, _ := a.peer(t, "b").Connect(false); ok {
		t.Error("Connect(false) right after a handshake completed started another")
	}
	// A rekey: a new session, a new id, the same at both ends.
	s.clk.Advance(time.Second)
	dg, ok, err := a.peer(t, "b").Connect(false)
	if err != nil || !ok {
		t.Fatalf("Connect with a current session: %v %v, want an initiation", ok, err)
	}
	s.send(a.addr, dg)
	s.deliverDue()
	if len(a.est) != 2 || len(b.est) != 2 {
		t.Fatalf("established %d / %d times, want 2", len(a.est), len(b.est))
	}
	second := a.est[1].Session
	if second == first || second != b.est[1].Session {
		t.Fatalf("rekey ids %x / %x, first %x", second, b.est[1].Session, first)
	}
	if err := s.seal(a, "b", []byte("on the second")); err != nil {
		t.Fatal(err)
	}
	s.deliverDue()
	if len(got) != 2 || got[0] != first || got[1] != second {
		t.Errorf("b received data on sessions %x, want %x then %x", got, first, second)
	}
}

// sealOn seals msg from n to peer on session id and delivers it.
func (s *sim) sealOn(n *node, peer string, id uint64, msg []byte) error {
	s.counter++
	out, ep, err := n.peer(s.t, peer).SealOn(id, s.counter, msg, make([]byte, len(msg)+Overhead))
	if err != nil {
		return err
	}
	s.send(n.addr, Datagram{To: ep, Data: out})
	s.deliverDue()
	return nil
}

// TestSealOn: a caller can keep sending on the session it knows while a
// newer one is current, but never on a session it does not name.
func TestSealOn(t *testing.T) {
	s, a, b := pair(t, Options{})
	var ids []uint64
	s.onRecv = func(n *node, r Result, err error) {
		if n == b && r.Data != nil {
			ids = append(ids, r.Session)
		}
	}
	s.connect(a, b)
	first := a.est[0].Session
	rekey := func() uint64 {
		t.Helper()
		s.clk.Advance(time.Second)
		dg, ok, err := b.peer(t, "a").Connect(false)
		if err != nil || !ok {
			t.Fatalf("Connect: %v %v", ok, err)
		}
		s.send(b.addr, dg)
		s.deliverDue()
		return b.est[len(b.est)-1].Session
	}
	second := rekey()
	if err := s.sealOn(a, "b", first, []byte("old")); err != nil {
		t.Fatalf("SealOn the previous session: %v", err)
	}
	if err := s.sealOn(a, "b", second, []byte("new")); err != nil {
		t.Fatalf("SealOn the current session: %v", err)
	}
	if err := s.sealOn(a, "b", second+1, []byte("none")); !errors.Is(err, ErrNoSession) {
		t.Errorf("SealOn an unknown session: %v, want ErrNoSession", err)
	}
	rekey()
	if err := s.sealOn(a, "b", first, []byte("gone")); !errors.Is(err, ErrNoSession) {
		t.Errorf("SealOn a session two rotations old: %v, want ErrNoSession", err)
	}
	if len(ids) != 2 || ids[0] != first || ids[1] != second {
		t.Errorf("b received on sessions %x, want %x %x", ids, first, second)
	}
	if len(b.errs) != 0 {
		t.Errorf("b: %v", b.errs)
	}
}

// TestConnectFresh: Connect(false) keeps the attempt in progress; with
// fresh, the outstanding initiations (made with an older payload) are
// dropped, so only a handshake carrying the payload of the moment
// completes.
func TestConnectFresh(t *testing.T) {
	s := newSim(t, 100*time.Millisecond)
	version := 1
	a := s.addNode("a", "192.0.2.1:4000", Options{Payload: func(string) []byte { return []byte(fmt.Sprint("v", version)) }},
		cfgFor("b", "198.51.100.2:4000"))
	b := s.addNode("b", "198.51.100.2:4000", Options{}, cfgFor("a", "192.0.2.1:4000"))
	p := a.peer(t, "b")
	dg, ok, err := p.Connect(false)
	if err != nil || !ok {
		t.Fatalf("Connect: %v %v", ok, err)
	}
	s.send(a.addr, dg)
	if _, ok, _ := p.Connect(false); ok {
		t.Error("Connect(false) started a second attempt while one is in progress")
	}
	version = 2
	dg, ok, err = p.Connect(true)
	if err != nil || !ok {
		t.Fatalf("Connect(true): %v %v", ok, err)
	}
	s.send(a.addr, dg)
	s.run(time.Second, 10*time.Millisecond)
	if len(a.est) != 1 || len(b.est) != 1 {
		t.Fatalf("established %d / %d times, want once", len(a.est), len(b.est))
	}
	if got := string(b.est[0].RemotePayload); got != "v2" {
		t.Errorf("b got payload %q, want the fresh one", got)
	}
	if got := string(a.est[0].LocalPayload); got != "v2" {
		t.Errorf("a reports having sent %q, want v2", got)
	}
	// The response to the first initiation found nothing to complete.
	var unknown int
	for _, err := range a.errs {
		if errors.Is(err, ErrUnknownIndex) {
			unknown++
		}
	}
	if unknown != 1 {
		t.Errorf("a's errors %v, want the stale response dropped once", a.errs)
	}
	// Removed peers do not connect.
	if err := a.dev.SetPeers(nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Connect(true); !errors.Is(err, ErrPeerRemoved) {
		t.Errorf("Connect on a removed peer: %v", err)
	}
}
