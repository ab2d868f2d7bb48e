package scps

// This file fuzzes Association.Receive with sequences of packets, seeded
// with packets captured from a simulated exchange.

import (
	"encoding/binary"
	"scpsvpn/scps/internal/wire"
	"testing"
	"time"
)

// fuzzTarget builds the association the fuzzer attacks: the even side of a
// pair with a stream open and about 40 packets in flight, so ACK, stream,
// credit and reset frames all meet real state.
func fuzzTarget() (*Association, time.Time) {
	now := simEpoch
	cfg := DefaultConfig()
	cfg.EvenStreams = true
	a, err := NewAssociation(cfg, now)
	if err != nil {
		panic(err)
	}
	id, _ := a.OpenStream([]byte("stream-0"))
	a.StreamWrite(id, make([]byte, 60_000))
	buf := make([]byte, 2000)
	for i := 0; i < 60; i++ {
		now = now.Add(time.Millisecond)
		for n, _ := a.Send(now, buf); n > 0; n, _ = a.Send(now, buf) {
		}
	}
	return a, now
}

// seedPackets captures what the odd side sends in a short exchange that
// mirrors fuzzTarget, each packet as a fuzz input and a few concatenated.
// Every packet the odd side sends passes the observer, so the i-th one
// seen is packet number i.
func seedPackets(t testing.TB) [][]byte {
	link := linkParams{Rate: 10e6, Delay: 5 * time.Millisecond, Loss: 0.05}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	var pkts [][]byte
	s.observe = func(from int, p []byte) bool {
		if from == 1 && len(pkts) < 40 {
			pkts = append(pkts, append([]byte(nil), p...))
		}
		return false
	}
	s.attach()
	// Small writes keep the seeds short, which keeps the fuzzer's
	// minimisation of interesting inputs quick.
	s.apps[1].onAccept = func(id uint64, meta []byte) *appStream {
		if id == 0 {
			return &appStream{toSend: 300, expect: -1, resetAfter: -1}
		}
		return &appStream{toSend: 3000, expect: -1, resetAfter: 100}
	}
	s.apps[0].open("stream-0", 200, -1)
	s.apps[0].open("stream-2", 5000, -1)
	s.a[1].SendDatagram([]byte("datagram"))
	s.runUntil(2*time.Second, func() bool { return false })
	s.a[1].Close(3, "done")
	s.runUntil(3*time.Second, func() bool { return false })
	var seeds [][]byte
	var multi []byte
	for i, p := range pkts {
		seeds = append(seeds, frameInput(nil, uint64(i), p))
		if i%3 == 0 {
			multi = frameInput(multi, uint64(i), p)
		}
	}
	// A block of eight packets with one missing, then its parity in two
	// packets (parity.go): the rebuild path.
	var rebuilt []byte
	for i, p := range pkts[:8] {
		if i != 3 {
			rebuilt = frameInput(rebuilt, uint64(i), p)
		}
	}
	for i, p := range parityBlockOf(pkts, 0, 8, 600, func([]byte) {}) {
		rebuilt = frameInput(rebuilt, 100+uint64(i), p)
	}
	return append(seeds, multi, rebuilt)
}

// frameInput appends packet pn, p, to a fuzz input: its length (2 bytes),
// its number (8 bytes) and its bytes.
func frameInput(b []byte, pn uint64, p []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	b = binary.BigEndian.AppendUint64(b, pn)
	return append(b, p...)
}

// FuzzReceive feeds arbitrary packet sequences to an association with
// state; nothing may panic, and the association must keep working
// (Send, Deadline, Tick, Stats, events).
func FuzzReceive(f *testing.F) {
	for _, s := range seedPackets(f) {
		f.Add(s)
	}
	// A path train's packets (ProbePath): a PING and padding (PADDING
	// is 0x00), two in a row.
	train := append([]byte{wire.FramePing}, make([]byte, 1200)...)
	f.Add(frameInput(frameInput(nil, 7, train), 8, train))
	// A told side's path probes: a PING and the path's role.
	f.Add(frameInput(frameInput(nil, 9, wire.AppendPathRole([]byte{wire.FramePing}, true)), 10, wire.AppendPathRole([]byte{wire.FramePing}, false)))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, now := fuzzTarget()
		buf := make([]byte, 2000)
		rd := make([]byte, 4096)
		for len(data) >= 10 {
			n := int(binary.BigEndian.Uint16(data))
			pn := binary.BigEndian.Uint64(data[2:])
			data = data[10:]
			if n > len(data) {
				n = len(data)
			}
			pkt := data[:n]
			data = data[n:]
			before := a.Stats()
			err := a.Receive(now, pn, pkt)
			if err != nil && a.Stats().PacketsReceived != before.PacketsReceived && a.Err() == nil {
				t.Fatalf("rejected packet changed the receive count: %v", err)
			}
			for {
				ev, ok := a.PollEvent()
				if !ok {
					break
				}
				if ev.Kind == EventAccept || ev.Kind == EventStream {
					a.StreamRead(ev.StreamID, rd)
				}
			}
			now = now.Add(time.Millisecond)
			if d := a.Deadline(); !d.IsZero() && !d.After(now) {
				a.Tick(now)
			}
			for i := 0; i < 100; i++ {
				if n, _ := a.Send(now, buf); n == 0 {
					break
				}
			}
			_ = a.Stats()
		}
	})
}

// FuzzReceivePaths is FuzzReceive for a side that learned two paths from
// its peer: each packet comes on the path its number's low bit names
// (ReceiveOn), so a peer's PATH_ROLE frames and probes meet the paths'
// state, and the association sends with SendOn.
func FuzzReceivePaths(f *testing.F) {
	for _, s := range seedPackets(f)[:8] {
		f.Add(s)
	}
	probe := func(backup bool) []byte { return wire.AppendPathRole([]byte{wire.FramePing}, backup) }
	f.Add(frameInput(frameInput(frameInput(nil, 9, probe(true)), 11, probe(false)), 12, probe(true)))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, now := fuzzTarget()
		for i := range 2 {
			if err := a.SetPath(i, PathOptions{Learned: true}); err != nil {
				t.Fatal(err)
			}
		}
		buf := make([]byte, 2000)
		for len(data) >= 10 {
			n := int(binary.BigEndian.Uint16(data))
			pn := binary.BigEndian.Uint64(data[2:])
			data = data[10:]
			n = min(n, len(data))
			pkt := data[:n]
			data = data[n:]
			_ = a.ReceiveOn(now, int(pn&1), pn, pkt)
			for {
				if _, ok := a.PollEvent(); !ok {
					break
				}
			}
			now = now.Add(20 * time.Millisecond)
			if d := a.Deadline(); !d.IsZero() && !d.After(now) {
				a.Tick(now)
			}
			for range 100 {
				if n, _, path := a.SendOn(now, buf); n == 0 {
					break
				} else if path < 0 || path > 1 {
					t.Fatalf("sent on path %d of 2", path)
				}
			}
			_ = a.Paths()
		}
	})
}
