package testbed

// This file owns the two-path underlay (Config.TwoPaths): a second veth
// pair between the sites beside the first (or, Kind Emulated, a second
// link emulator with its own model, Config.Link2), A told of both links as
// [[peer.path]] tables (docs/multipath.md), B learning them from A's
// packets, and cutting a link (SetPathUp).

import (
	"fmt"
	"net/netip"

	"scpsvpn/cmd/internal/namespace"
	"scpsvpn/configs"
)

// PathNames are the names of A's two paths: "one" over the underlay,
// "two" over the second link.
var PathNames = [2]string{"one", "two"}

// secondUnderlay is the second link's subnet: A .1, B .2.
var secondUnderlay = [2]netip.Prefix{netip.MustParsePrefix("10.201.0.1/24"), netip.MustParsePrefix("10.201.0.2/24")}

// buildSecondLink makes the second link: a veth pair (devices
// "stp<id><a|b>") or a second emulator (devices "emv<id><a|b>").
func (tb *Testbed) buildSecondLink() error {
	tb.A.Underlay2, tb.B.Underlay2 = secondUnderlay[0], secondUnderlay[1]
	if tb.Kind == Emulated {
		tb.A.UnderlayDev2, tb.B.UnderlayDev2 = "emv"+tb.ID+"a", "emv"+tb.ID+"b"
		emu, err := tb.startEmulator(tb.cfg.Link2, tb.A.UnderlayDev2, tb.B.UnderlayDev2, tb.A.Underlay2, tb.B.Underlay2)
		if err != nil {
			return fmt.Errorf("testbed: the second link: %w", err)
		}
		tb.emu2 = emu
		return nil
	}
	tb.A.UnderlayDev2, tb.B.UnderlayDev2 = "stp"+tb.ID+"a", "stp"+tb.ID+"b"
	return tb.vethPair(tb.A.UnderlayDev2, tb.B.UnderlayDev2, tb.A.Underlay2, tb.B.Underlay2)
}

// paths are A's [[peer.path]] tables for B: one per link, the second a
// backup when Config.BackupPath is set.
func (tb *Testbed) paths() ([]configs.Path, error) {
	var out []configs.Path
	for i, local := range []netip.Prefix{tb.A.Underlay, tb.A.Underlay2} {
		remote := []netip.Prefix{tb.B.Underlay, tb.B.Underlay2}[i]
		p := configs.Path{
			Name:     PathNames[i],
			Local:    local.Addr().String(),
			Endpoint: netip.AddrPortFrom(remote.Addr(), uint16(tb.cfg.Port)).String(),
			Backup:   i == 1 && tb.cfg.BackupPath,
		}
		raw := tb.cfg.PathLink
		if tb.cfg.PathLinks != [2]string{} {
			raw = tb.cfg.PathLinks[i]
		}
		if err := decodeRaw(raw, &p.Link); err != nil {
			return nil, fmt.Errorf("testbed: the [peer.path.link] lines: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// SetPathUp cuts (up false) or restores A's side of path i (0 or 1) of a
// two-path testbed: its device goes down or up, so nothing crosses that
// link either way.
func (tb *Testbed) SetPathUp(i int, up bool) error {
	dev := []string{tb.A.UnderlayDev, tb.A.UnderlayDev2}[i]
	h, err := namespace.Netlink(tb.A.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("testbed: path %d: %w", i, err)
	}
	if up {
		err = h.LinkSetUp(link)
	} else {
		err = h.LinkSetDown(link)
	}
	if err != nil {
		return fmt.Errorf("testbed: path %d up=%v: %w", i, up, err)
	}
	return nil
}
