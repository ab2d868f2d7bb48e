package tunneltest

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"
)

// hangGuard bounds a wait that should end at once.
const hangGuard = 10 * time.Second

// closeEnds checks that closing twice ends a pending call with want.
func closeEnds(t *testing.T, call string, close func() error, want error, pending func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- pending() }()
	close()
	close()
	select {
	case err := <-errc:
		if !errors.Is(err, want) {
			t.Errorf("pending %s after Close: %v, want %v", call, err, want)
		}
	case <-time.After(hangGuard):
		t.Fatalf("Close did not end a pending %s", call)
	}
}

func readBatch(t *testing.T, tun *TUN, n, offset int) [][]byte {
	t.Helper()
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, offset+100)
	}
	sizes := make([]int, n)
	got, err := tun.Read(bufs, sizes, offset)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, got)
	for i := range out {
		out[i] = bufs[i][offset : offset+sizes[i]]
	}
	return out
}

func TestTUNReadsWhatIsInjectedInBatches(t *testing.T) {
	tun := NewTUN(func([]byte) {})
	pkt := []byte{1, 2, 3}
	for i := range TUNBatch + 2 {
		pkt[0] = byte(i)
		if !tun.Inject(pkt) {
			t.Fatal("Inject refused on an open TUN")
		}
	}
	pkt[0] = 99 // Inject took a copy
	first := readBatch(t, tun, TUNBatch, 10)
	if len(first) != TUNBatch || first[0][0] != 0 || !bytes.Equal(first[1], []byte{1, 2, 3}) {
		t.Fatalf("first read %v, want %d packets from 0", first, TUNBatch)
	}
	rest := readBatch(t, tun, TUNBatch, 0)
	if len(rest) != 2 || rest[1][0] != TUNBatch+1 {
		t.Fatalf("second read %v, want the 2 left", rest)
	}
}

func TestTUNDeliversCopiesOfWrites(t *testing.T) {
	var got [][]byte
	tun := NewTUN(func(p []byte) { got = append(got, p) })
	bufs := [][]byte{{0, 0, 7, 8}, {0, 0, 9}}
	if n, err := tun.Write(bufs, 2); err != nil || n != 2 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	bufs[0][2] = 0
	if len(got) != 2 || !bytes.Equal(got[0], []byte{7, 8}) || !bytes.Equal(got[1], []byte{9}) {
		t.Fatalf("delivered %v", got)
	}
}

func TestTUNClose(t *testing.T) {
	tun := NewTUN(func([]byte) {})
	if tun.Closed() {
		t.Fatal("new TUN is closed")
	}
	closeEnds(t, "Read", tun.Close, os.ErrClosed, func() error {
		_, err := tun.Read([][]byte{make([]byte, 10)}, []int{0}, 0)
		return err
	})
	if !tun.Closed() || tun.Inject([]byte{1}) {
		t.Error("closed TUN takes packets")
	}
	if _, err := tun.Write([][]byte{{1}}, 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
}

var (
	addrA = netip.MustParseAddrPort("192.0.2.1:4700")
	addrB = netip.MustParseAddrPort("192.0.2.2:4700")
	addrC = netip.MustParseAddrPort("192.0.2.3:4700")
)

type received struct {
	src  netip.AddrPort
	data []byte
}

// receive returns the datagrams of one Receive call.
func receive(t *testing.T, c *Conn) []received {
	t.Helper()
	var out []received
	if err := c.Receive(func(src netip.AddrPort, pkt []byte) {
		out = append(out, received{src, pkt})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWireCarriesDatagramsByAddress(t *testing.T) {
	w := NewWire()
	a, b := w.Listen(addrA), w.Listen(addrB)
	if a.LocalAddr() != addrA {
		t.Errorf("LocalAddr = %v", a.LocalAddr())
	}
	p := []byte("hello")
	if err := a.Send([][]byte{p, []byte("hi")}, addrB); err != nil {
		t.Fatal(err)
	}
	if err := a.SendNow([]byte("now"), addrB); err != nil {
		t.Fatal(err)
	}
	p[0] = 'j'
	if b.Queued() != 3 || a.Queued() != 0 {
		t.Errorf("queued: b %d, a %d; want 3, 0", b.Queued(), a.Queued())
	}
	got := receive(t, b)
	if len(got) != 3 || got[0].src != addrA || string(got[0].data) != "hello" || string(got[2].data) != "now" {
		t.Fatalf("b received %v", got)
	}
	// Nobody at addrC: lost without an error, as UDP is, but counted as sent.
	if err := a.Send([][]byte{make([]byte, 1300)}, addrC); err != nil {
		t.Fatal(err)
	}
	if a.Sent() != 4 || a.LargestTo(addrB) != 5 || a.LargestTo(addrC) != 1300 {
		t.Errorf("sent %d, largest to b %d, to c %d", a.Sent(), a.LargestTo(addrB), a.LargestTo(addrC))
	}
}

func TestWireReceivesInBatches(t *testing.T) {
	w := NewWire()
	a, b := w.Listen(addrA), w.Listen(addrB)
	for range ReceiveBatch + 1 {
		a.Send([][]byte{{1}}, addrB)
	}
	if n := len(receive(t, b)); n != ReceiveBatch {
		t.Errorf("first Receive gave %d datagrams, want %d", n, ReceiveBatch)
	}
	if n := len(receive(t, b)); n != 1 {
		t.Errorf("second Receive gave %d, want 1", n)
	}
}

func TestWireFilterAndFullQueueDrop(t *testing.T) {
	w := NewWire()
	a, b := w.Listen(addrA), w.Listen(addrB)
	w.SetFilter(func(from, to netip.AddrPort) bool { return from != addrA })
	a.Send([][]byte{{1}}, addrB)
	w.SetFilter(nil)
	a.Send([][]byte{{2}}, addrB)
	if got := receive(t, b); len(got) != 1 || got[0].data[0] != 2 {
		t.Fatalf("after the filter: %v, want only the datagram sent without it", got)
	}
	batch := make([][]byte, connQueue+3)
	for i := range batch {
		batch[i] = []byte{3}
	}
	a.Send(batch, addrB)
	if w.Drops() != 3 {
		t.Errorf("drops = %d, want the 3 past a full queue", w.Drops())
	}
}

func TestWireCloseAndRebind(t *testing.T) {
	w := NewWire()
	a := w.Listen(addrA)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("binding an address in use did not panic")
			}
		}()
		w.Listen(addrA)
	}()
	closeEnds(t, "Receive", a.Close, net.ErrClosed, func() error {
		return a.Receive(func(netip.AddrPort, []byte) {})
	})
	if err := a.Send([][]byte{{1}}, addrB); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	// A closed socket's datagrams are lost; its address may be bound again.
	b := w.Listen(addrB)
	b.Send([][]byte{{1}}, addrA)
	a2 := w.Listen(addrA)
	b.Send([][]byte{{2}}, addrA)
	if got := receive(t, a2); len(got) != 1 || got[0].data[0] != 2 {
		t.Errorf("rebound socket received %v", got)
	}
}

func TestNetRecords(t *testing.T) {
	var n Net
	addrs := []netip.Prefix{netip.MustParsePrefix("10.1.0.1/32")}
	if err := n.Up(addrs); err != nil {
		t.Fatal(err)
	}
	if got, up := n.Addrs(); !up || !slices.Equal(got, addrs) {
		t.Errorf("addrs %v up %v", got, up)
	}
	routes := []netip.Prefix{netip.MustParsePrefix("10.3.0.0/24"), netip.MustParsePrefix("10.2.0.0/24")}
	if err := n.SetRoutes(routes); err != nil {
		t.Fatal(err)
	}
	if got := n.Routes(); len(got) != 2 || got[0] != routes[1] {
		t.Errorf("routes %v, want both sorted", got)
	}
	refused := errors.New("refused")
	n.FailRoutes(refused)
	if err := n.SetRoutes(nil); err != refused || len(n.Routes()) != 2 {
		t.Errorf("SetRoutes while failing: %v, routes %v", err, n.Routes())
	}
	n.FailRoutes(nil)
	n.Down()
	if len(n.Routes()) != 0 || n.Downs() != 1 {
		t.Errorf("after Down: routes %v, downs %d", n.Routes(), n.Downs())
	}
	failing := Net{FailUp: refused}
	if err := failing.Up(addrs); err != refused {
		t.Errorf("Up with FailUp: %v", err)
	}
	if _, up := failing.Addrs(); up {
		t.Error("a refused Up counts as up")
	}
}
