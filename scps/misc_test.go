package scps

// This file tests datagrams, association close, idle timeout, rejection of
// bad packets, protocol violations and Config validation.

import (
	"errors"
	"testing"
	"time"

	"scpsvpn/scps/internal/wire"
	"scpsvpn/scps/varint"
)

func TestDatagrams(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond, Loss: 0.1}
	s := newSim(t, 2, DefaultConfig(), DefaultConfig(), link, link)
	var got [][]byte
	s.a[1].SetDatagramHandler(func(p []byte) { got = append(got, append([]byte(nil), p...)) })
	const n = 200
	for i := 0; i < n; i++ {
		p := make([]byte, 1+i*5)
		for j := range p {
			p[j] = byte(i)
		}
		if err := s.a[0].SendDatagram(p); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		s.runUntil(s.now+time.Millisecond, func() bool { return false })
	}
	s.runUntil(s.now+time.Second, func() bool { return false })
	for _, p := range got {
		for _, c := range p {
			if c != p[0] || len(p) != 1+int(p[0])*5 {
				t.Fatalf("corrupt datagram %v", p[:min(len(p), 8)])
			}
		}
	}
	st := s.a[0].Stats()
	if st.Retransmits != 0 {
		t.Errorf("datagrams were retransmitted: %d", st.Retransmits)
	}
	if len(got) < n*8/10 || len(got) > n {
		t.Errorf("received %d of %d datagrams over a 10%% loss link", len(got), n)
	}
	t.Logf("received %d of %d; lost packets %d", len(got), n, st.PacketsLost)

	if err := s.a[0].SendDatagram(make([]byte, s.a[0].MaxDatagramSize()+1)); !errors.Is(err, ErrDatagramTooLarge) {
		t.Errorf("oversize datagram: %v", err)
	}
	// The largest datagram fits a packet.
	if err := s.a[0].SendDatagram(make([]byte, s.a[0].MaxDatagramSize())); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, s.a[0].Config().MaxPacketSize)
	if sz, _ := s.a[0].Send(s.clock(), buf); sz == 0 {
		t.Errorf("largest datagram not sent")
	}
	// A burst beyond the queue is dropped and counted, never blocks.
	drops := 0
	for i := 0; i < 2*datagramQueueLen; i++ {
		if err := s.a[0].SendDatagram([]byte{1}); errors.Is(err, ErrDatagramDropped) {
			drops++
		}
	}
	if drops != datagramQueueLen || s.a[0].Stats().DatagramsDropped < uint64(drops) {
		t.Errorf("dropped %d (stats %d), want %d", drops, s.a[0].Stats().DatagramsDropped, datagramQueueLen)
	}
	// Queued datagrams expire rather than wait long.
	s.dir[0].p.Down = true
	s.now += time.Second
	for n, _ := s.a[0].Send(s.clock(), buf); n > 0; n, _ = s.a[0].Send(s.clock(), buf) {
	}
	if s.a[0].dgrams.count != 0 {
		t.Errorf("%d datagrams still queued after 1s", s.a[0].dgrams.count)
	}
}

func TestAssociationClose(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	sp := sizesSpec(5, 1, 5<<20, 5<<20)
	startTransfer(s, sp)
	s.runUntil(500*time.Millisecond, func() bool { return false })
	s.a[0].Close(7, "bye")
	s.runUntil(2*time.Second, func() bool { return s.a[0].Done() && s.apps[1].closedAt != nil })
	if !errors.Is(s.apps[0].closedAt, ErrClosed) {
		t.Errorf("closer: %v", s.apps[0].closedAt)
	}
	var pc *PeerClosedError
	if !errors.As(s.apps[1].closedAt, &pc) || pc.Code != 7 || pc.Reason != "bye" {
		t.Errorf("peer: %v", s.apps[1].closedAt)
	}
	for side := 0; side < 2; side++ {
		for id, st := range s.apps[side].streams {
			if !st.closed {
				t.Errorf("side %d stream %d not closed", side, id)
			}
			var re *ResetError
			if st.closeErr == nil && st.eof {
				continue // finished before the close
			}
			if side == 1 && (!errors.As(st.closeErr, &re) || re.Code != 7) {
				t.Errorf("peer stream %d closed with %v", id, st.closeErr)
			}
		}
		if !s.a[side].Closed() {
			t.Errorf("side %d not closed", side)
		}
	}
	if _, err := s.a[0].OpenStream(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("OpenStream after close: %v", err)
	}
	if !s.a[0].Deadline().IsZero() {
		t.Errorf("closed association still has a deadline")
	}
}

func TestIdleTimeoutAndKeepalive(t *testing.T) {
	cfg := DefaultConfig()
	cfg.IdleTimeout = 3 * time.Second
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond}
	s := newSim(t, 1, cfg, cfg, link, link)
	s.attach()
	// Idle but connected: keep-alives hold it open.
	s.runUntil(20*time.Second, func() bool { return s.a[0].Closed() || s.a[1].Closed() })
	if s.a[0].Closed() || s.a[1].Closed() {
		t.Fatalf("idle association closed at %v: %v / %v", s.now, s.a[0].Err(), s.a[1].Err())
	}
	// The link fails: both sides give up after IdleTimeout.
	s.dir[0].p.Down, s.dir[1].p.Down = true, true
	down := s.now
	s.runUntil(60*time.Second, func() bool { return s.a[0].Closed() && s.a[1].Closed() })
	if !errors.Is(s.a[0].Err(), ErrIdleTimeout) || !errors.Is(s.a[1].Err(), ErrIdleTimeout) {
		t.Fatalf("errors %v / %v", s.a[0].Err(), s.a[1].Err())
	}
	if took := s.now - down; took > cfg.IdleTimeout+time.Second {
		t.Errorf("idle timeout after %v", took)
	}
}

func TestBadPacketsRejected(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 5 * time.Millisecond}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	b := s.a[1]
	valid := wire.AppendStreamHeader(nil, 0, 0, []byte("m"), true, false, true, 3)
	valid = append(valid, "abc"...)
	bad := []struct {
		pn  uint64
		pkt []byte
	}{
		{5, nil},          // no frames
		{5, []byte{0x3f}}, // unknown frame
		{5, append(append([]byte{}, valid...), 0x02, 0x40)}, // valid STREAM, then truncated ACK
		{5, []byte{0x02, 0x09, 0x00, 0x00, 0x00}},           // ACK of a packet never sent
		{5, []byte{0x11, 0x01, 0x00}},                       // STREAM on our own stream 1... never opened
		{varint.Max + 1, valid},                             // a packet number no ACK could name
	}
	before := b.Stats()
	for i, p := range bad {
		err := b.Receive(s.clock(), p.pn, p.pkt)
		if !errors.Is(err, ErrBadPacket) {
			t.Errorf("packet %d (%d: %x): err %v", i, p.pn, p.pkt, err)
		}
	}
	after := b.Stats()
	if after.BadPackets != before.BadPackets+uint64(len(bad)) {
		t.Errorf("bad packets counted %d, want %d", after.BadPackets-before.BadPackets, len(bad))
	}
	if after.PacketsReceived != before.PacketsReceived || after.StreamsAccepted != 0 || len(b.streams.ByID) != 0 {
		t.Errorf("state changed by bad packets: %+v", after)
	}
	if _, ok := b.PollEvent(); ok {
		t.Errorf("bad packets produced events")
	}
	// The valid packet alone is accepted.
	if err := b.Receive(s.clock(), 0, valid); err != nil {
		t.Fatalf("valid packet: %v", err)
	}
	if ev, ok := b.PollEvent(); !ok || ev.Kind != EventAccept || ev.StreamID != 0 {
		t.Errorf("event %+v %v", ev, ok)
	}
	// Its duplicate is counted and ignored.
	if err := b.Receive(s.clock(), 0, valid); err != nil || b.Stats().DuplicatePackets != 1 {
		t.Errorf("duplicate: %v %d", err, b.Stats().DuplicatePackets)
	}
}

func TestFlowControlViolationCloses(t *testing.T) {
	link := linkParams{}
	s := newSim(t, 1, DefaultConfig(), DefaultConfig(), link, link)
	// One byte beyond the window the receiver grants a new stream.
	p := wire.AppendStreamHeader(nil, 0, s.a[1].cfg.initialStreamWindow(), nil, false, false, true, 1)
	p = append(p, 'x')
	err := s.a[1].Receive(s.clock(), 0, p)
	if !errors.Is(err, ErrProtocol) || !errors.Is(s.a[1].Err(), ErrProtocol) {
		t.Fatalf("err %v, association %v", err, s.a[1].Err())
	}
	// The peer is told.
	s.runUntil(time.Second, func() bool { return s.a[0].Closed() })
	var pc *PeerClosedError
	if !errors.As(s.a[0].Err(), &pc) || pc.Code != CodeProtocolViolation {
		t.Errorf("peer: %v", s.a[0].Err())
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config (all defaults): %v", err)
	}
	bad := []struct {
		field string
		mod   func(*Config)
	}{
		{"MaxPacketSize", func(c *Config) { c.MaxPacketSize = 1000 }},
		{"WireOverhead", func(c *Config) { c.WireOverhead = -1 }},
		{"InitialRTT", func(c *Config) { c.InitialRTT = -time.Second }},
		{"MinRTO", func(c *Config) { c.MinRTO = time.Hour }},
		{"SendRate", func(c *Config) { c.SendRate = 100 }},
		{"RecvRate", func(c *Config) { c.RecvRate = -1 }},
		{"Congestion", func(c *Config) { c.Congestion = "bogus" }},
		{"StreamWindow", func(c *Config) { c.StreamWindow = 1000 }},
		{"ConnWindow", func(c *Config) { c.ConnWindow = 2 << 20; c.StreamWindow = 4 << 20 }},
		{"SendBuffer", func(c *Config) { c.SendBuffer = 10 }},
		{"MaxStreams", func(c *Config) { c.MaxStreams = 3 }},
		{"IdleTimeout", func(c *Config) { c.IdleTimeout = time.Millisecond }},
		{"AckEvery", func(c *Config) { c.AckEvery = 1000 }},
		{"Congestion", func(c *Config) { c.Congestion = "rate"; c.SendRate = 0 }},
		{"Loss", func(c *Config) { c.Loss = "sometimes" }},
		{"AcksPerRTT", func(c *Config) { c.AcksPerRTT = 100 }},
		{"OutageAfter", func(c *Config) { c.OutageAfter = time.Millisecond }},
		{"ProbeInterval", func(c *Config) { c.ProbeInterval = time.Hour }},
		{"MaxOutage", func(c *Config) { c.MaxOutage = 2 * time.Second; c.OutageAfter = 5 * time.Second }},
	}
	for _, b := range bad {
		c := DefaultConfig()
		b.mod(&c)
		err := c.Validate()
		if err == nil || !errors.Is(err, ErrConfig) || !contains(err.Error(), b.field) {
			t.Errorf("%s: %v", b.field, err)
		}
		if _, err := NewAssociation(c, time.Now()); err == nil {
			t.Errorf("%s: NewAssociation accepted it", b.field)
		}
	}
}

func TestConfigAutoSizes(t *testing.T) {
	// Unknown rates: the floors to start from, and no cap but
	// maxAutoWindow: what is measured sizes the windows.
	c := DefaultConfig().withDefaults()
	if c.StreamWindow != 0 || c.ConnWindow != 0 || c.SendBuffer != 0 {
		t.Errorf("automatic sizes filled in: %d %d %d", c.StreamWindow, c.ConnWindow, c.SendBuffer)
	}
	if c.initialStreamWindow() != minInitialStreamWindow || c.initialConnWindow() != 2*minInitialStreamWindow || c.initialSendBuffer() != DefaultSendBuffer {
		t.Errorf("initial sizes without rates: %d %d %d", c.initialStreamWindow(), c.initialConnWindow(), c.initialSendBuffer())
	}
	if c.streamWindowLimit() != maxAutoWindow || c.connWindowLimit() != 2*maxAutoWindow || c.sendBufferLimit() != maxAutoWindow {
		t.Errorf("limits without rates: %d %d %d", c.streamWindowLimit(), c.connWindowLimit(), c.sendBufferLimit())
	}
	// 50 Mbit/s down, 10 up, 600 ms: four BDPs, granted at once.
	c = DefaultConfig()
	c.RecvRate, c.SendRate, c.InitialRTT = 50e6, 10e6, 600*time.Millisecond
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	bdpDown := uint64(50e6 / 8 * 0.6)
	if w := c.initialStreamWindow(); w != 4*bdpDown {
		t.Errorf("initial stream window %d, want %d", w, 4*bdpDown)
	}
	if c.initialSendBuffer() != DefaultSendBuffer {
		t.Errorf("send buffer %d: 4 x 750 kB is below the floor", c.initialSendBuffer())
	}
	c.SendRate = 100e6
	if b := c.initialSendBuffer(); b < 4*100e6/8*0.6 || b > 4*100e6/8*0.6+65536 {
		t.Errorf("send buffer %d for a 7.5 MB BDP", b)
	}
	// An explicit size is a cap (windows) or fixed (send buffer).
	c = DefaultConfig()
	c.RecvRate, c.InitialRTT, c.StreamWindow, c.SendBuffer = 50e6, 600*time.Millisecond, 1<<20, 256<<10
	c = c.withDefaults()
	if c.streamWindowLimit() != 1<<20 || c.initialStreamWindow() != 1<<20 || c.connWindowLimit() != 2<<20 {
		t.Errorf("explicit StreamWindow: limit %d, initial %d, association %d", c.streamWindowLimit(), c.initialStreamWindow(), c.connWindowLimit())
	}
	if c.initialSendBuffer() != 256<<10 || c.sendBufferLimit() != 256<<10 {
		t.Errorf("explicit SendBuffer: %d, limit %d", c.initialSendBuffer(), c.sendBufferLimit())
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestPacketsShrinkAsTheirNumberGrows: with Config.HeaderGrowth, packet pn
// holds at most MaxPacketSize - HeaderGrowth(pn) bytes, and full packets
// fill exactly that, so every datagram the layer below makes is the same
// size whatever number it carries.
func TestPacketsShrinkAsTheirNumberGrows(t *testing.T) {
	now := simEpoch
	cfg := DefaultConfig()
	cfg.EvenStreams = true
	cfg.SendRate = 100e6
	cfg.HeaderGrowth = func(pn uint64) int {
		if pn >= 5 {
			return 3
		}
		return 0
	}
	a, err := NewAssociation(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.OpenStream([]byte("bulk"))
	if err != nil {
		t.Fatal(err)
	}
	a.StreamWrite(id, make([]byte, 60_000))
	buf := make([]byte, cfg.MaxPacketSize+100)
	largest := map[bool]int{} // by pn >= 5
	for range 200 {
		now = now.Add(time.Millisecond)
		for {
			n, pn := a.Send(now, buf)
			if n == 0 {
				break
			}
			if room := cfg.MaxPacketSize - cfg.HeaderGrowth(pn); n > room {
				t.Fatalf("packet %d: %d bytes, room %d", pn, n, room)
			}
			largest[pn >= 5] = max(largest[pn >= 5], n)
		}
	}
	if largest[false] != cfg.MaxPacketSize || largest[true] != cfg.MaxPacketSize-3 {
		t.Errorf("largest packets %d (pn < 5), %d (pn >= 5); want %d, %d", largest[false], largest[true], cfg.MaxPacketSize, cfg.MaxPacketSize-3)
	}
	if a.MaxDatagramSize() > cfg.MaxPacketSize-3-2 {
		t.Errorf("MaxDatagramSize %d does not leave room for the largest header growth", a.MaxDatagramSize())
	}
}

// TestDatagramRoom: a sender that waits for DatagramRoom fills no more
// than a quarter of the datagram queue, so datagrams that cannot wait
// still find room behind it, and the room comes back once they are sent.
func TestDatagramRoom(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond}
	s := newSim(t, 2, DefaultConfig(), DefaultConfig(), link, link)
	a := s.a[0]
	queued := 0
	for a.DatagramRoom(1200) {
		if err := a.SendDatagram(make([]byte, 1200)); err != nil {
			t.Fatal(err)
		}
		queued++
	}
	if queued == 0 || queued > datagramQueueLen/4 {
		t.Fatalf("%d datagrams queued under DatagramRoom, want 1..%d", queued, datagramQueueLen/4)
	}
	if err := a.SendDatagram(make([]byte, 100)); err != nil {
		t.Errorf("a datagram behind the waiting sender's: %v", err)
	}
	s.runUntil(s.now+time.Second, func() bool { return false })
	if !a.DatagramRoom(1200) {
		t.Error("no room once the queue was sent")
	}
}

// TestDatagramRoomWindowFull: while the congestion window is full (a
// bulk stream over a long round trip), a sender waiting for DatagramRoom
// queues no more than datagramRoomClosed datagrams, which a longer stall
// would drop (datagramMaxAge); the rest wait in the sender's own queue.
func TestDatagramRoomWindowFull(t *testing.T) {
	link := linkParams{Rate: 100e6, Delay: 300 * time.Millisecond}
	s := newSim(t, 3, DefaultConfig(), DefaultConfig(), link, link)
	s.attach()
	s.apps[0].open("bulk", 1<<30, -1)
	a := s.a[0]
	if !s.runUntil(10*time.Second, func() bool { return !a.sent.WindowOpen() }) {
		t.Fatal("the bulk stream never filled the window")
	}
	for i := 0; a.DatagramRoom(1200) && i < datagramQueueLen; i++ {
		if err := a.SendDatagram(make([]byte, 1200)); err != nil {
			t.Fatal(err)
		}
	}
	if a.dgrams.count > datagramRoomClosed {
		t.Errorf("%d datagrams queued under DatagramRoom with the window full, want at most %d", a.dgrams.count, datagramRoomClosed)
	}
}

// TestDatagramApart: datagrams of one group each leave in a packet of
// their own, however small, while datagrams of no group, and of other
// groups, share packets.
func TestDatagramApart(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 20 * time.Millisecond}
	s := newSim(t, 2, DefaultConfig(), DefaultConfig(), link, link)
	a := s.a[0]
	buf := make([]byte, a.Config().MaxPacketSize)
	packets := func(send func(i int)) int {
		t.Helper()
		for i := range 6 {
			send(i)
		}
		n := 0
		for a.dgrams.count > 0 {
			if sz, _ := a.Send(s.clock(), buf); sz == 0 {
				t.Fatalf("%d datagrams queued, none sent", a.dgrams.count)
			}
			n++
		}
		return n
	}
	small := []byte{0x45, 1, 2, 3}
	if n := packets(func(int) { a.SendDatagram(small) }); n != 1 {
		t.Errorf("6 small datagrams of no group took %d packets, want 1", n)
	}
	if n := packets(func(int) { a.SendDatagramApart(small, 7) }); n != 6 {
		t.Errorf("6 small datagrams of one group took %d packets, want 6", n)
	}
	if n := packets(func(i int) { a.SendDatagramApart(small, uint64(1+i%2)) }); n != 3 {
		t.Errorf("6 small datagrams of two groups, alternating, took %d packets, want 3", n)
	}
}

// TestDatagramGroupAge: on a host starved of the processor, the
// association sends nothing for a while. That time does not age its
// datagrams (setNow), up to maxPostpone: late, they still come, and in
// order. Beyond it, its plain datagrams (a DNS query) are dropped after
// datagramMaxAge, but those of a group (a repaired QUIC flow's block,
// whose loss the far end asks for again and holds the flow a round trip
// for) wait up to a round trip more.
func TestDatagramGroupAge(t *testing.T) {
	link := linkParams{Rate: 10e6, Delay: 300 * time.Millisecond}
	for _, tc := range []struct {
		stall                time.Duration
		wantPlain, wantGroup int
	}{
		{50 * time.Millisecond, 4, 4},
		{300 * time.Millisecond, 4, 4},
		{time.Second, 0, 4},
		{2 * time.Second, 0, 0},
	} {
		s := newSim(t, 4, DefaultConfig(), DefaultConfig(), link, link)
		var got []byte
		s.a[1].SetDatagramHandler(func(p []byte) { got = append(got, p[0]) })
		// An RTT sample first.
		if err := s.a[0].SendDatagram([]byte{0}); err != nil {
			t.Fatal(err)
		}
		s.runUntil(2*time.Second, func() bool { return false })
		if srtt := s.a[0].Stats().SRTT; srtt < 500*time.Millisecond {
			t.Fatalf("smoothed RTT %v, want about 600 ms", srtt)
		}
		got = got[:0]
		dropped := s.a[0].Stats().DatagramsDropped
		for i := range 4 {
			if err := s.a[0].SendDatagram([]byte{1, byte(i)}); err != nil {
				t.Fatal(err)
			}
			if err := s.a[0].SendDatagramApart([]byte{2, byte(i)}, 9); err != nil {
				t.Fatal(err)
			}
		}
		// The host starved: nothing runs until now.
		s.now += tc.stall
		s.runUntil(s.now+2*time.Second, func() bool { return false })
		plain, group := 0, 0
		for _, b := range got {
			switch b {
			case 1:
				plain++
			case 2:
				group++
			}
		}
		if plain != tc.wantPlain || group != tc.wantGroup {
			t.Errorf("after a stall of %v: %d plain and %d grouped datagrams came, want %d and %d", tc.stall, plain, group, tc.wantPlain, tc.wantGroup)
		}
		if d := s.a[0].Stats().DatagramsDropped - dropped; d != uint64(8-plain-group) {
			t.Errorf("after a stall of %v: %d dropped, want %d", tc.stall, d, 8-plain-group)
		}
	}
}
