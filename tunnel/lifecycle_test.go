package tunnel

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"scpsvpn/tunnel/tunneltest"
)

// TestStatusSocket: `scpsvpn status` reads the endpoint's state from its
// control socket: interface, key, peers with their association, counters.
func TestStatusSocket(t *testing.T) {
	_, a, b := twoSites(t)
	b.echo(7)
	openEcho(t, a, "10.2.0.5:7")
	st, err := ReadStatus(a.ifName())
	if err != nil {
		t.Fatal(err)
	}
	if st.Interface != a.ifName() || st.Listen != "192.0.2.1:4700" || st.PublicKey != a.priv.PublicKey().String() {
		t.Errorf("status names %s %s %s", st.Interface, st.Listen, st.PublicKey)
	}
	if len(st.Peers) != 1 {
		t.Fatalf("status lists %d peers, want 1", len(st.Peers))
	}
	p := st.Peers[0]
	if p.Name != "b" || !p.Up || p.Endpoint != "192.0.2.2:4700" || !slices.Equal(p.Subnets, []string{"10.2.0.0/24", "fd00:2::/64"}) || p.LastHandshake.IsZero() {
		t.Errorf("peer status %+v", p)
	}
	if p.Association.StreamsOpened != 1 || st.Counters.FlowsOpened != 1 || st.Counters.UDPIn == 0 {
		t.Errorf("counters: streams opened %d, flows opened %d, UDP in %d", p.Association.StreamsOpened, st.Counters.FlowsOpened, st.Counters.UDPIn)
	}
	if _, err := ReadStatus("none-" + a.ifName()); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("status of no endpoint: %v", err)
	}
}

// TestStopResetsFlows: a stopping endpoint resets its local connections
// and tells the peer, which resets the connections it re-originated.
func TestStopResetsFlows(t *testing.T) {
	_, a, b := twoSites(t)
	srv := b.listen(80)
	c, err := a.dial("10.1.0.7:0", "10.2.0.5:80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := accept(t, srv)
	defer sc.Close()
	// A byte across first: the flow is spliced at both ends when a stops.
	sc.SetReadDeadline(time.Now().Add(waitTime))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(sc, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	a.stop()
	c.SetReadDeadline(time.Now().Add(waitTime))
	if _, err := c.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("a's client after a stopped: %v, want a reset", err)
	}
	sc.SetReadDeadline(time.Now().Add(waitTime))
	if _, err := sc.Read(make([]byte, 1)); !isReset(err) {
		t.Errorf("b's server after a stopped: %v, want a reset", err)
	}
}

// TestGarbageGetsNoReply: datagrams that are not from a peer are dropped
// and counted, and never answered.
func TestGarbageGetsNoReply(t *testing.T) {
	h, a, _ := twoSites(t)
	stranger := h.wire.Listen(netip.MustParseAddrPort("192.0.2.99:4700"))
	defer stranger.Close()
	before := a.ep.Stats().UDPDropped.Load()
	var junk [][]byte
	for _, n := range []int{1, 16, 148, 1400} {
		junk = append(junk, randomBytes(n))
	}
	if err := stranger.Send(junk, a.wireAddr); err != nil {
		t.Fatal(err)
	}
	if !waitFor(waitTime, func() bool { return a.ep.Stats().UDPDropped.Load()-before == uint64(len(junk)) }) {
		t.Errorf("%d of %d junk datagrams counted as dropped", a.ep.Stats().UDPDropped.Load()-before, len(junk))
	}
	time.Sleep(100 * time.Millisecond)
	if n := stranger.Queued(); n != 0 {
		t.Errorf("the stranger got %d replies", n)
	}
}

// TestRealUDPSockets: two endpoints on real UDP sockets on loopback (no
// root needed). b has no address for a: it learns it from a's handshake
// and then reaches a's LAN too.
func TestRealUDPSockets(t *testing.T) {
	h := newHarness(t)
	a := h.addSite("a", "127.0.0.1:0", "10.1.0.0/24")
	b := h.addSite("b", "127.0.0.1:0", "10.2.0.0/24")
	a.realUDP, b.realUDP = true, true
	b.start(peerSpec{s: a, noEndpoint: true})
	a.start(a.peer(b))
	a.waitUp(b)
	b.echo(7)
	openEcho(t, a, "10.2.0.5:7")
	a.echo(7)
	echoFrom(t, b, "10.2.0.9:0", "10.1.0.5:7")
	if ep := b.ep.Status().Peers[0].Endpoint; ep != a.wireAddr.String() {
		t.Errorf("b knows a at %q, want %v", ep, a.wireAddr)
	}
}

// TestRunFailsCleanly: a configuration Run cannot start with fails with an
// error naming the cause, and what the caller handed over is closed.
func TestRunFailsCleanly(t *testing.T) {
	checkNoLeaks(t)
	h := &harness{t: t, wire: tunneltest.NewWire(), logs: &logStore{}, done: make(chan struct{}), dir: t.TempDir()}
	a := h.addSite("a", "192.0.2.1:4700", "10.1.0.0/24")
	b := h.addSite("b", "192.0.2.2:4700", "10.2.0.0/24")
	defer a.host.Close()
	defer b.host.Close()
	log := slog.New(&recHandler{st: h.logs})
	a.conn.Close() // each case below hands Run a socket of its own
	for _, tc := range []struct {
		name string
		edit func(*Options)
		key  string
		want string
	}{
		{"missing key file", nil, "/nonexistent/a.key", "interface.private_key_file"},
		{"network config refused", func(o *Options) { o.Net = &tunneltest.Net{FailUp: errors.New("address refused")} }, "", "address refused"},
	} {
		cfg := a.config(a.peer(b))
		if tc.key != "" {
			cfg.PrivateKeyFile = tc.key
		}
		tun, conn := tunneltest.NewTUN(func([]byte) {}), h.wire.Listen(a.wireAddr)
		opts := Options{TUN: tun, Conn: conn, Net: &tunneltest.Net{}}
		if tc.edit != nil {
			tc.edit(&opts)
		}
		ep, err := New(cfg, log, opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTime)
		err = ep.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Run returned %v, want an error about %q", tc.name, err, tc.want)
		}
		if !tun.Closed() || !conn.Closed() {
			t.Errorf("%s: the TUN or socket handed to Run is still open", tc.name)
		}
	}
}
