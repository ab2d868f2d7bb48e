package tunnel

import (
	"net/netip"
	"testing"
	"time"

	"scpsvpn/scps"
)

// TestLearnedPathSlots: a newly learned path takes a free number after
// the configured paths, else a retired path's, else the one heard from
// longest ago; never a configured path's.
func TestLearnedPathSlots(t *testing.T) {
	var lp learnedPaths
	lp.first = 2
	now := time.Now()
	for i := lp.first; i < scps.MaxPaths; i++ {
		if got := lp.slotFor(nil); got != i {
			t.Fatalf("free slot %d, want %d", got, i)
		}
		ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 4700)
		lp.addr[i].Store(&ap)
		lp.heard[i] = now.Add(time.Duration(i) * time.Second)
	}
	lp.heard[5] = now.Add(-time.Hour)
	if got := lp.slotFor(nil); got != 5 {
		t.Errorf("full table: slot %d, want 5 (heard longest ago)", got)
	}
	if got := lp.slotFor([]scps.PathStats{{Index: 1, Retired: true}, {Index: 6, Retired: true}}); got != 6 {
		t.Errorf("with retired paths 1 (configured) and 6: slot %d, want 6", got)
	}
}

// TestMultipathCapability: the handshake payload of a peer with paths
// says so, and the bit survives the round trip.
func TestMultipathCapability(t *testing.T) {
	for _, caps := range []uint8{0, capMultipath} {
		p, err := parseParams(assocParams{version: wireVersion, caps: caps, instance: 1}.marshal())
		if err != nil || p.caps != caps {
			t.Errorf("caps %#x: parsed %#x, %v", caps, p.caps, err)
		}
	}
}

// TestUntoldRates: an association whose paths are all learned from a
// multipath peer drops the rates [peer.link] told (one link's, which path
// it cannot tell) and stays valid, the open-loop rate controller too.
func TestUntoldRates(t *testing.T) {
	for _, cc := range []string{"", "rate", "hybla"} {
		cfg := scps.DefaultConfig()
		cfg.SendRate, cfg.RecvRate, cfg.InitialRTT = 10_000_000, 2_000_000, 600*time.Millisecond
		if cc != "" {
			cfg.Congestion = cc
		}
		untoldRates(&cfg)
		if cfg.SendRate != 0 || cfg.RecvRate != 0 || cfg.InitialRTT != 600*time.Millisecond {
			t.Errorf("congestion %q: send %d recv %d rtt %v, want no rates and the told RTT", cc, cfg.SendRate, cfg.RecvRate, cfg.InitialRTT)
		}
		if cc == "hybla" && cfg.Congestion != cc {
			t.Errorf("hybla became %q", cfg.Congestion)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("congestion %q: %v", cc, err)
		}
	}
}

// TestPathRolesTold: both sites' handshakes carry the path roles bit
// (capPathRoles), so each association's path probes say which of its
// paths is a backup (scps Config.PathRoles).
func TestPathRolesTold(t *testing.T) {
	_, a, b := quicSites(t, "")
	for _, s := range [][2]*site{{a, b}, {b, a}} {
		if !s[0].assoc(s[1]).cur.Load().sess.Config().PathRoles {
			t.Errorf("%s: the association toward %s tells no path's role", s[0].name, s[1].name)
		}
	}
}
