package tunnel

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestSegmentSizeRoundTrip(t *testing.T) {
	oob := make([]byte, gsoOOBLen)
	putSegmentSize(oob, 1452)
	// What we write for UDP_SEGMENT has the layout the kernel uses for
	// UDP_GRO, apart from the type; check the parser on a GRO header.
	oob[12] = 104 // UDP_GRO (cmsg_type is the int after the 8-byte length and 4-byte level)
	if got := segmentSize(oob); got != 1452 {
		t.Fatalf("segmentSize = %d", got)
	}
	for _, bad := range [][]byte{nil, make([]byte, 8), bytes.Repeat([]byte{0xff}, 32)} {
		if got := segmentSize(bad); got != 0 {
			t.Errorf("segmentSize(%x) = %d", bad, got)
		}
	}
}

// TestBatchedUDPLoopback sends runs of datagrams of mixed sizes through the
// GSO sender and reads them back through the GRO receiver: every datagram
// arrives whole, in order.
func TestBatchedUDPLoopback(t *testing.T) {
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	setSocketBuffers(tx, slog.New(slog.DiscardHandler))
	setSocketBuffers(rx, slog.New(slog.DiscardHandler))
	sender := newUDPSock(tx).sender()
	recv := newUDPSock(rx).receiver(8)

	var want [][]byte
	for i := 0; i < 100; i++ {
		size := 1400
		if i%17 == 16 {
			size = 300 // a short one ends a GSO run
		}
		p := bytes.Repeat([]byte{byte(i)}, size)
		copy(p, fmt.Sprintf("%03d", i))
		want = append(want, p)
	}
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	if err := sender.send(want, to); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < len(want) {
		err := recv.read(func(src netip.AddrPort, pkt []byte) {
			got = append(got, append([]byte(nil), pkt...))
		})
		if err != nil {
			t.Fatalf("after %d datagrams: %v", len(got), err)
		}
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d: %d bytes starting %q, want %d starting %q", i, len(got[i]), got[i][:3], len(want[i]), want[i][:3])
		}
	}
}

// TestReceiveTimestamp: a datagram read 50 ms after it arrived is handed
// over with the time it arrived (the kernel's stamp), not the time it was
// read, and the stamp is gone once Receive returns.
func TestReceiveTimestamp(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := newUDPSock(c)
	defer s.Close()
	if !s.stamps {
		t.Skip("SO_TIMESTAMPNS not available")
	}
	sent := time.Now()
	if err := s.Send([][]byte{[]byte("stamp")}, s.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	var arrived, read time.Time
	if err := s.Receive(func(netip.AddrPort, []byte) { arrived, read = s.Arrived(), time.Now() }); err != nil {
		t.Fatal(err)
	}
	if arrived.IsZero() || arrived.Before(sent.Add(-time.Second)) || read.Sub(arrived) < 40*time.Millisecond {
		t.Errorf("arrived %v after the send, read %v after it: want the arrival, at least 40 ms before the read", arrived.Sub(sent), read.Sub(sent))
	}
	if !s.Arrived().IsZero() {
		t.Errorf("Arrived after Receive returned = %v, want zero", s.Arrived())
	}
	if got := receiveTime(bytes.Repeat([]byte{0xff}, 40), time.Now()); !got.IsZero() {
		t.Errorf("receiveTime of garbage = %v", got)
	}
}
