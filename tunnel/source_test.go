package tunnel

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"scpsvpn/configs"
	"scpsvpn/peers"
)

// sourceEndpoint is an endpoint with only its peer table: "wide" owns
// 10.0.0.0/8, "narrow" owns 10.1.0.0/24 inside it, "v6" owns fd00:3::/64.
func sourceEndpoint(t *testing.T) (*Endpoint, map[string]*assoc) {
	t.Helper()
	priv, err := peers.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	var pcs []peers.PeerConfig
	assocs := map[string]*assoc{}
	e := &Endpoint{log: slog.New(slog.NewTextHandler(io.Discard, nil)), spoofed: rateLimiter{perSecond: 1}}
	for _, p := range []struct{ name, subnet string }{{"wide", "10.0.0.0/8"}, {"narrow", "10.1.0.0/24"}, {"v6", "fd00:3::/64"}} {
		k, err := peers.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		pc := configs.PeerConfig{Name: p.name, PublicKey: k.PublicKey(), Subnets: []netip.Prefix{netip.MustParsePrefix(p.subnet)}}
		pcs = append(pcs, peers.PeerConfig{Name: pc.Name, PublicKey: peers.Key(pc.PublicKey), Subnets: pc.Subnets})
		assocs[p.name] = &assoc{e: e, cfg: pc}
	}
	if e.dev, err = peers.NewDevice(priv, pcs, peers.Options{}); err != nil {
		t.Fatal(err)
	}
	return e, assocs
}

// A peer speaks only for the sources whose longest-prefix owner it is.
func TestSpeaksForLongestPrefix(t *testing.T) {
	_, as := sourceEndpoint(t)
	cases := []struct {
		peer, src string
		want      bool
	}{
		{"wide", "10.9.0.1", true},
		{"wide", "10.1.1.1", true},    // outside narrow's /24
		{"wide", "10.1.0.7", false},   // narrow's, though inside 10.0.0.0/8
		{"narrow", "10.1.0.7", true},  // its own
		{"narrow", "10.9.0.1", false}, // wide's
		{"wide", "192.168.1.1", false},
		{"v6", "fd00:3::9", true},
		{"v6", "::ffff:10.1.0.7", false}, // 4in6 is the IPv4 address
		{"narrow", "::ffff:10.1.0.7", true},
		{"wide", "fd00:3::9", false},
	}
	for _, c := range cases {
		if got := as[c.peer].speaksFor(netip.MustParseAddr(c.src)); got != c.want {
			t.Errorf("%s speaks for %s: %v, want %v", c.peer, c.src, got, c.want)
		}
	}
}

// Packets from our own TUN with a source in any peer's subnet are dropped
// and counted; our own sources pass.
func TestTUNSourceInPeerSubnetDropped(t *testing.T) {
	e, _ := sourceEndpoint(t)
	for _, src := range []string{"10.1.0.7", "10.200.0.1", "fd00:3::1"} {
		if e.localSource(netip.MustParseAddr(src)) {
			t.Errorf("source %s in a peer's subnet accepted from the TUN", src)
		}
	}
	for _, src := range []string{"192.168.1.5", "fd00:1::5", "fe80::1"} {
		if !e.localSource(netip.MustParseAddr(src)) {
			t.Errorf("local source %s dropped", src)
		}
	}
	if n := e.stats.TunBadSrc.Load(); n != 3 {
		t.Errorf("TunBadSrc = %d, want 3", n)
	}
}
