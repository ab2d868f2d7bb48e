package scps

// This file tests tail parity (parity.go): a loss older than the tail
// copies reach repaired from a parity within about the copies' idle wait,
// the receiver's side on its own (one loss rebuilt, two not, a block
// whose packets are no longer kept not, a forged block dropped), and
// the page it is for.

import (
	"testing"
	"time"

	"scpsvpn/scps/internal/wire"
)

// olderLossResponse answers a 100-byte request with a response of size
// bytes on GEO 10/2 (rates configured, no random loss), losing once the
// server's packet that carries the response's byte size-back when back >
// 0. It returns the response's time from the request and both sides' stats.
func olderLossResponse(t *testing.T, size, back uint64, parity bool) (time.Duration, Stats, Stats) {
	t.Helper()
	var backs []uint64
	if back > 0 {
		backs = []uint64{back}
	}
	return lossesResponse(t, size, backs, parity)
}

// lossesResponse is olderLossResponse losing once each packet that
// carries the response's byte size-back for each of backs.
func lossesResponse(t *testing.T, size uint64, backs []uint64, parity bool) (time.Duration, Stats, Stats) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TailParity = parity
	return responseLosing(t, newGEOSimConfig(t, 2e6, 10e6, true, cfg), size, backs)
}

// responseLosing is lossesResponse over simulator s.
func responseLosing(t *testing.T, s *sim, size uint64, backs []uint64) (time.Duration, Stats, Stats) {
	t.Helper()
	warmResponder(t, s, size)
	dropped := make([]bool, len(backs))
	s.observe = func(from int, pkt []byte) bool {
		if from != 1 {
			return false
		}
		for i, back := range backs {
			if !dropped[i] && carriesByte(pkt, 2, size-back) {
				dropped[i] = true
				return true
			}
		}
		return false
	}
	start := s.now
	s0, c0 := s.a[1].Stats(), s.a[0].Stats()
	st := s.apps[0].open("stream-2", 100, int64(size))
	if !s.runUntil(start+30*time.Second, func() bool { return st.eof }) {
		t.Fatal("the response did not arrive")
	}
	for i, d := range dropped {
		if !d {
			t.Fatalf("no packet carried byte %d to drop", size-backs[i])
		}
	}
	srv, cli := s.a[1].Stats(), s.a[0].Stats()
	srv.ParityPackets -= s0.ParityPackets
	srv.ParityBytes -= s0.ParityBytes
	srv.TailCopies -= s0.TailCopies
	cli.ParityRepairs -= c0.ParityRepairs
	return st.eofAt - start, srv, cli
}

// carriesByte reports whether packet pkt holds a STREAM frame of stream id
// with byte off.
func carriesByte(pkt []byte, id, off uint64) bool {
	var f wire.Frame
	for p := 0; p < len(pkt); {
		n, err := wire.ParseFrame(pkt[p:], &f)
		if err != nil {
			return false
		}
		if f.Type == wire.FrameStream && f.StreamID == id && f.Offset <= off && off < f.Offset+uint64(len(f.Data)) {
			return true
		}
		p += n
	}
	return false
}

// TestTailParityRepairsOlderLoss: a 2 MB response on GEO 10/2 (600 ms)
// whose packet 400 kB (0.33 s) before its end is lost: the tail copies,
// which wait 75 ms of idle and go newest first, reach it only after its
// own repair (a round trip after it was sent, 0.27 s after the end), so
// without parity the loss costs about that; a parity over its block of
// 32 packets, sent first when the sender falls idle, rebuilds it within
// about the idle wait (0.1 s).
func TestTailParityRepairsOlderLoss(t *testing.T) {
	const rtt = 600 * time.Millisecond
	const size, back = 2_000_000, 400_000
	clean, _, _ := olderLossResponse(t, size, 0, true)
	withParity, sst, cst := olderLossResponse(t, size, back, true)
	without, _, _ := olderLossResponse(t, size, back, false)
	t.Logf("%d-byte response: %v without loss; a packet %d bytes before its end lost: %v with parity (%d parity packets, %d bytes; %d rebuilt; %d copies), %v without",
		size, clean, back, withParity, sst.ParityPackets, sst.ParityBytes, cst.ParityRepairs, sst.TailCopies, without)
	if withParity-clean > rtt/5 {
		t.Errorf("the loss cost %v with parity, want at most a fifth of the RTT", withParity-clean)
	}
	if without-clean < rtt/3 {
		t.Errorf("the loss cost only %v without parity: the case does not test what parity adds", without-clean)
	}
	if cst.ParityRepairs != 1 || cst.BadParity != 0 {
		t.Errorf("the client rebuilt %d packets (%d bad blocks), want the one lost", cst.ParityRepairs, cst.BadParity)
	}
	// What it costs: one parity per block of the last round trip's
	// packets (0.6 s at 10 Mbit/s: about 500 packets, at most parityReach
	// of them), each a packet's size.
	if maxBytes := uint64(paritySlots) * (2 + tunnelPacketSize); sst.ParityBytes > maxBytes {
		t.Errorf("the server sent %d bytes of parity, want at most %d", sst.ParityBytes, maxBytes)
	}
}

// TestTailParityShortPath: an 8 MB response on LEO (100/20 Mbit/s, 40
// ms, untold) whose packet 100 kB (8 ms) before its end is lost. Its own
// repair comes a round trip after it was sent; the parity over its block
// rebuilds it sooner, sent once the sender has been idle srtt/16 (2.6
// ms) where it waited minCopyIdle (10 ms, a quarter of the round trip):
// the loss cost 4.1 ms then (the bottleneck's queue hid the rest of the
// wait), 0.4 ms now.
func TestTailParityShortPath(t *testing.T) {
	const size, back = 8_000_000, 100_000
	link := pageLEOLink
	link.loss = 0
	clean, _, _ := responseLosing(t, pageSim(t, 1, link), size, nil)
	lossy, sst, cst := responseLosing(t, pageSim(t, 1, link), size, []uint64{back})
	t.Logf("%d-byte response: %v without loss, %v with a packet %d bytes before its end lost (%d parity packets, %d bytes; %d rebuilt)",
		size, clean, lossy, back, sst.ParityPackets, sst.ParityBytes, cst.ParityRepairs)
	if lossy-clean > link.rtt/16 {
		t.Errorf("the loss cost %v, want at most a sixteenth of the RTT (%v)", lossy-clean, link.rtt/16)
	}
	if cst.ParityRepairs != 1 {
		t.Errorf("the client rebuilt %d packets, want the one lost", cst.ParityRepairs)
	}
}

// TestTailParityTwoLossesNear: a 2 MB response on GEO 10/2 (600 ms)
// that loses two packets 14 apart 0.13 s before its end, both younger
// than 3/4 of the minimum RTT when the sender falls idle. One parity over
// the block of 32 they shared rebuilt neither (two missing), and the
// newer one's repair came a round trip after it was sent, 0.5 s after
// the end; the newest packets' parities now go over blocks of 8
// (parityFine), so each loss is alone in its block and both are rebuilt
// within about the idle wait. The bench's GEO page with 0.5% loss lost
// a round trip so (seed 1: two losses 14 packets apart, 1.12x its floor).
func TestTailParityTwoLossesNear(t *testing.T) {
	const rtt = 600 * time.Millisecond
	const size = 2_000_000
	backs := []uint64{165_600, 165_600 - 14*1300}
	clean, _, _ := lossesResponse(t, size, nil, true)
	lossy, sst, cst := lossesResponse(t, size, backs, true)
	t.Logf("%d-byte response: %v without loss, %v with two losses near its end (%d parity packets, %d bytes; %d rebuilt)",
		size, clean, lossy, sst.ParityPackets, sst.ParityBytes, cst.ParityRepairs)
	if lossy-clean > rtt/5 {
		t.Errorf("the losses cost %v, want at most a fifth of the RTT", lossy-clean)
	}
	if cst.ParityRepairs != 2 || cst.BadParity != 0 {
		t.Errorf("the client rebuilt %d packets (%d bad blocks), want both lost", cst.ParityRepairs, cst.BadParity)
	}
	// What it costs: a packet per 8 of the packets younger than 3/4 of
	// the round trip (0.45 s at 10 Mbit/s: about 400), one per 32 of the
	// rest.
	if maxBytes := uint64(56 * (2 + tunnelPacketSize)); sst.ParityBytes > maxBytes {
		t.Errorf("the server sent %d bytes of parity, want at most %d", sst.ParityBytes, maxBytes)
	}
}

// parityPair is two associations talking directly (no link), the client
// (0) told parity, for tests of the receiver alone.
func parityPair(t *testing.T) (srv, cli *Association, now time.Time) {
	t.Helper()
	now = simEpoch
	cfg := DefaultConfig()
	cfg.EvenStreams = true
	cli, err := NewAssociation(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	cfg.EvenStreams = false
	srv, err = NewAssociation(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	return srv, cli, now
}

// parityBlockOf is the PARITY frames (one per packet) of the block over
// pkts[first:first+count], each of at most room bytes of the block, the
// block as tamper leaves it.
func parityBlockOf(pkts [][]byte, first, count uint64, room int, tamper func([]byte)) [][]byte {
	size := 0
	for _, p := range pkts[first : first+count] {
		size = max(size, 2+len(p))
	}
	blk := make([]byte, size)
	for _, p := range pkts[first : first+count] {
		blk[0] ^= byte(len(p) >> 8)
		blk[1] ^= byte(len(p))
		for i, c := range p {
			blk[2+i] ^= c
		}
	}
	tamper(blk)
	var out [][]byte
	for off := 0; off < size; off += room {
		end := min(size, off+room)
		out = append(out, wire.AppendParity(nil, wire.Parity{First: first, Count: count, Size: uint64(size), Offset: uint64(off)}, blk[off:end]))
	}
	return out
}

// TestParityReceiver: the server sends 20 packets of a stream; the client
// gets them but for the lost ones, then a block's parity in two packets.
// One lost of the block: rebuilt, its data delivered, acknowledged. Two
// lost: nothing rebuilt, counted unused. A forged block (its bytes not
// the packets' XOR): dropped and counted, never delivered.
func TestParityReceiver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lost    []uint64
		forge   bool
		rebuilt uint64
	}{
		{"one lost", []uint64{7}, false, 1},
		{"two lost", []uint64{7, 15}, false, 0},
		{"forged", []uint64{7}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli, now := parityPair(t)
			// The client opens the stream the server answers on.
			id, _ := cli.OpenStream([]byte("m"))
			cli.StreamWrite(id, []byte("request"))
			buf := make([]byte, 2000)
			n, pn := cli.Send(now, buf)
			if err := srv.Receive(now, pn, buf[:n]); err != nil {
				t.Fatal(err)
			}
			srv.StreamWrite(id, make([]byte, 40_000))
			var pkts [][]byte
			for i := 0; i < 200 && len(pkts) < 20; i++ {
				now = now.Add(time.Millisecond)
				if n, pn := srv.Send(now, buf); n > 0 {
					if pn != uint64(len(pkts)) {
						t.Fatalf("packet %d numbered %d", len(pkts), pn)
					}
					pkts = append(pkts, append([]byte(nil), buf[:n]...))
				}
			}
			if len(pkts) < 20 {
				t.Fatalf("the server sent %d packets, want 20", len(pkts))
			}
			lost := map[uint64]bool{}
			for _, pn := range tc.lost {
				lost[pn] = true
			}
			for pn, p := range pkts {
				if !lost[uint64(pn)] {
					if err := cli.Receive(now, uint64(pn), p); err != nil {
						t.Fatal(err)
					}
				}
			}
			rd := make([]byte, 100_000)
			before, _ := cli.StreamRead(id, rd)
			// Forged: the rebuilt packet's length beyond the block.
			frames := parityBlockOf(pkts, 0, 20, 900, func(b []byte) {
				if tc.forge {
					b[0] ^= 0x40
				}
			})
			for i, f := range frames {
				if err := cli.Receive(now, 1000+uint64(i), f); err != nil {
					t.Fatal(err)
				}
			}
			st := cli.Stats()
			if st.ParityRepairs != tc.rebuilt {
				t.Errorf("rebuilt %d packets, want %d", st.ParityRepairs, tc.rebuilt)
			}
			got, _ := cli.StreamRead(id, rd)
			switch {
			case tc.rebuilt == 1 && (got == 0 || !cli.ack.Duplicate(7)):
				t.Errorf("the rebuilt packet: %d bytes readable after the %d before it, acknowledged %v; want the data after it and its number", got, before, cli.ack.Duplicate(7))
			case tc.rebuilt == 0 && got != 0:
				t.Errorf("%d bytes readable after the %d before the hole, from a block that could rebuild nothing", got, before)
			}
			if len(tc.lost) == 2 && st.ParityUnused != 1 {
				t.Errorf("%d blocks counted unused, want 1", st.ParityUnused)
			}
			if tc.forge && st.BadParity != 1 {
				t.Errorf("%d forged blocks counted, want 1", st.BadParity)
			}
		})
	}
}

// TestParityFrameCodec: a PARITY frame decodes as encoded, and one whose
// fields are out of bounds is malformed.
func TestParityFrameCodec(t *testing.T) {
	q := wire.Parity{First: 1 << 20, Count: 32, Size: 1300, Offset: 700}
	b := wire.AppendParity(nil, q, make([]byte, 600))
	if len(b) != wire.ParityHeaderLen(q, 600)+600 {
		t.Fatalf("frame of %d bytes, header length says %d", len(b), wire.ParityHeaderLen(q, 600)+600)
	}
	var f wire.Frame
	n, err := wire.ParseFrame(b, &f)
	if err != nil || n != len(b) || f.Parity != q || len(f.Data) != 600 {
		t.Fatalf("decoded %+v (%d bytes, %v), want %+v", f.Parity, n, err, q)
	}
	for _, bad := range []wire.Parity{
		{First: 0, Count: 0, Size: 100},                       // no packet
		{First: 0, Count: wire.MaxParityCount + 1, Size: 100}, // too many
		{First: 0, Count: 2, Size: 2},                         // no payload byte
		{First: 0, Count: 2, Size: wire.MaxParityBlock + 1},   // too large
		{First: 0, Count: 2, Size: 100, Offset: 90},           // beyond the block
	} {
		if _, err := wire.ParseFrame(wire.AppendParity(nil, bad, make([]byte, 20)), &f); err == nil {
			t.Errorf("%+v decoded, want malformed", bad)
		}
	}
}

// parityHeld is the bytes a's tail parity holds: the receiver's ring and
// the sender's blocks.
func parityHeld(a *Association) uint64 {
	n := a.parityIn.held()
	for i := range a.parityOut.blocks {
		n += uint64(cap(a.parityOut.blocks[i].buf))
	}
	return n
}

// TestParityInBudget: tail parity's buffers (the receiver's ring of kept
// payloads, about 0.7 MB, and the sender's blocks) come out of the memory
// budget before the streams share it, so an association's streams and
// parity together stay within Config.Memory, whatever the budget: a
// 3 MB download over GEO 10/2 with the least budget (no room beyond the
// streams' need: no parity), a little more (a smaller ring), and ample
// (the full ring). Before, the streams shared the whole budget and the
// ring came on top of it.
func TestParityInBudget(t *testing.T) {
	for _, tc := range []struct {
		budget uint64
		ring   int // the receiver's slots
	}{
		{MinMemory, 0},
		{MinMemory + 200<<10, (200<<10 - paritySlots*(2+tunnelPacketSize)) / tunnelPacketSize},
		{64 << 20, parityRing},
	} {
		s := newGEOSim(t, 10e6, 2e6, tc.budget)
		st := s.apps[0].open("stream-0", 3_000_000, 0)
		if !s.runUntil(30*time.Second, func() bool { return s.apps[1].streams[0] != nil && s.apps[1].streams[0].eof }) {
			t.Fatalf("budget %d: the download did not finish", tc.budget)
		}
		_ = st
		for i, a := range s.a {
			held, limit := parityHeld(a), a.streams.Mem.Limit
			t.Logf("budget %d, side %d: streams' part %d, parity holds %d (%d slots), ParityPackets %d",
				tc.budget, i, limit, held, a.parityIn.slots, a.Stats().ParityPackets)
			if limit+held > tc.budget {
				t.Errorf("budget %d, side %d: streams' part %d and parity's %d exceed it", tc.budget, i, limit, held)
			}
			if limit < MinMemory {
				t.Errorf("budget %d, side %d: the streams got %d, under their least %d", tc.budget, i, limit, MinMemory)
			}
			if a.parityIn.slots != tc.ring {
				t.Errorf("budget %d, side %d: %d slots kept, want %d", tc.budget, i, a.parityIn.slots, tc.ring)
			}
		}
		if rx := s.a[1]; tc.ring > 0 && len(rx.parityIn.ring) != tc.ring {
			t.Errorf("budget %d: the receiver kept no payloads", tc.budget)
		}
	}
}

// TestParityRingBounded: the receiver keeps a payload only up to its
// own packet size, which its budget counts per slot: a peer whose
// packets are larger (another path MTU, or a bug) cannot grow the ring
// past slots times MaxPacketSize.
func TestParityRingBounded(t *testing.T) {
	r := parityReceiver{slots: 100, most: 1350}
	big, small := make([]byte, 9000), make([]byte, 1350)
	for pn := range uint64(1000) {
		pkt := small
		if pn%2 == 0 {
			pkt = big
		}
		r.store(pn, pkt)
	}
	if got, most := r.held(), uint64(100*1350); got > most {
		t.Errorf("the ring holds %d bytes, want at most %d", got, most)
	}
	if r.slot(998) != nil || r.slot(999) == nil {
		t.Error("want the large payload not kept and the small one kept")
	}
}

// TestParityReceiverSkipsHistory: the receiving side of a download is
// idle and sends ACKs and window updates alone, none of which a parity
// would ever cover; its association reckons its next deadline after each
// packet it receives, and when that looked up every recent block's
// packets in the sent history (parityEligible), it was, through the
// binary at 250 Mbit/s, more of the receiving endpoint's time than
// Receive itself. Blocks that carried no data are not looked up.
func TestParityReceiverSkipsHistory(t *testing.T) {
	const size = 3_000_000
	s := newGEOSimConfig(t, 2e6, 10e6, true, DefaultConfig())
	warmResponder(t, s, size)
	cli := s.a[0]
	got := cli.Stats().PacketsReceived
	if got < size/tunnelPacketSize {
		t.Fatalf("the client received %d packets, want >= %d", got, size/tunnelPacketSize)
	}
	if w := cli.parityOut.walks; w > 64 {
		t.Errorf("the receiving side looked up %d blocks in its sent history over %d packets received, want <= 64", w, got)
	}
}
