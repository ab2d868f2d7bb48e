package stack

import (
	"bytes"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// TestInjectBatchCoalesces: a batch of one flow's consecutive segments, as
// a TUN read returns a split 64 KB segment, reaches the connection intact
// and in order, and with trusted checksums the stack's TCP handles it as
// far fewer segments.
func TestInjectBatchCoalesces(t *testing.T) {
	for _, tc := range []struct {
		name      string
		v6, trust bool
	}{{"IPv4", false, true}, {"IPv6", true, true}, {"IPv4-untrusted", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := client4, server4
			if tc.v6 {
				src, dst = client6, server6
			}
			out := &captured{}
			conns := make(chan *Conn, 1)
			s, err := New(Config{MTU: 1400, Output: out.output, Logger: testLogger(), TrustRXChecksums: tc.trust,
				HandleTCP: func(r *TCPRequest) {
					go func() {
						if c, err := r.Accept(); err == nil {
							conns <- c
						}
					}()
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.InjectBatch([][]byte{buildTCP(src, dst, header.TCPFlagSyn, 1000, nil)})
			var synAck []byte
			if !waitFor(10*time.Second, func() bool {
				for _, p := range out.all() {
					if _, _, f, ok := parseTCP(p); ok && f == header.TCPFlagSyn|header.TCPFlagAck {
						synAck = p
						return true
					}
				}
				return false
			}) {
				t.Fatal("no SYN-ACK")
			}
			ipLen := header.IPv4MinimumSize
			if tc.v6 {
				ipLen = header.IPv6MinimumSize
			}
			ack := header.TCP(synAck[ipLen:]).SequenceNumber() + 1
			s.InjectBatch([][]byte{buildTCPAck(src, dst, header.TCPFlagAck, 1001, ack, nil)})
			var c *Conn
			select {
			case c = <-conns:
			case <-time.After(hangGuard):
				t.Fatal("connection not accepted")
			}
			defer c.Close()

			const segs, size = 16, 1000
			want := make([]byte, segs*size)
			for i := range want {
				want[i] = byte(i * 7)
			}
			batch := make([][]byte, segs)
			for i := range batch {
				batch[i] = buildTCPAck(src, dst, header.TCPFlagAck, 1001+uint32(i*size), ack, want[i*size:(i+1)*size])
			}
			before := s.gs.Stats().TCP.ValidSegmentsReceived.Value()
			s.InjectBatch(batch)
			got := make([]byte, 0, len(want))
			buf := make([]byte, len(want))
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for len(got) < len(want) {
				n, err := c.Read(buf)
				if err != nil {
					t.Fatalf("read after %d bytes: %v", len(got), err)
				}
				got = append(got, buf[:n]...)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the connection read other bytes than the segments carried")
			}
			// Coalesced, the 16 segments are handled as one; a margin of
			// one for anything else the stack counts.
			if n := s.gs.Stats().TCP.ValidSegmentsReceived.Value() - before; tc.trust && n > 2 {
				t.Errorf("the stack's TCP handled %d segments for a batch of %d consecutive ones", n, segs)
			}
		})
	}
}

// FuzzInjectBatch feeds batches through the coalescing path (trusted
// checksums): the input is cut into three packets, and a batch may repeat
// one as a flow's next segment would. Nothing may panic, and every packet
// is counted as delivered or bad.
func FuzzInjectBatch(f *testing.F) {
	seg := func(seq uint32, flags header.TCPFlags) []byte {
		return buildTCPAck(client4, server4, flags, seq, 1, make([]byte, 100))
	}
	join := func(ps ...[]byte) []byte { return bytes.Join(ps, nil) }
	a, b := seg(1, header.TCPFlagAck), seg(101, header.TCPFlagAck)
	f.Add(join(a, b, seg(201, header.TCPFlagAck|header.TCPFlagPsh)), uint16(len(a)), uint16(2*len(a)))
	f.Add(join(a, b, a), uint16(len(a)), uint16(2*len(a)))
	six := buildTCPAck(client6, server6, header.TCPFlagAck, 1, 1, make([]byte, 50))
	f.Add(join(six, six[:45], buildTCP(client6, server6, header.TCPFlagSyn, 1, nil)), uint16(len(six)), uint16(len(six)+45))
	f.Add([]byte{0x45, 0, 0}, uint16(1), uint16(2))

	s, err := New(Config{MTU: 1400, Output: func([][]byte, int) error { return nil }, TrustRXChecksums: true,
		Logger: testLogger(), HandleTCP: func(r *TCPRequest) { r.Refuse() }})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	f.Fuzz(func(t *testing.T, in []byte, i, j uint16) {
		x, y := min(int(i), len(in)), min(int(j), len(in))
		x, y = min(x, y), max(x, y)
		batch := [][]byte{in[:x], in[x:y], in[y:]}
		before := s.Stats()
		s.InjectBatch(batch)
		after := s.Stats()
		if in, bad := after.PacketsIn-before.PacketsIn, after.BadPackets-before.BadPackets; in+bad != uint64(len(batch)) {
			t.Errorf("%d delivered + %d bad for a batch of %d", in, bad, len(batch))
		}
	})
}
