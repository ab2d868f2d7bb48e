package bench

// This file owns the link conditions: the table from the design document
// (the paper's B1/C1/C2 and the GEO and LEO field cases) plus the
// draft-kuhn-quic-4-sat GEO cases, their selection by name, and their
// translation into the emulator's options and the [peer.link] tables a user
// would write for each site.
//
// Direction: a "download" goes from site B (the server) to site A (the
// client). A condition's Down is that direction, the emulator's return
// direction (B->A); Up is A->B, the emulator's forward direction.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/configs"
)

// Condition is one emulated link.
type Condition struct {
	Name        string
	Desc        string           // where it comes from
	Down, Up    int64            // bit/s of whole IP packets: B->A (the download) and A->B
	RTT         time.Duration    // round trip, split evenly between the directions
	LossDown    float64          // random loss per packet, B->A
	LossUp      float64          // random loss per packet, A->B
	OutageEvery linkemu.Periodic // periodic outages of both directions; zero = none

	// The transport's targets add what follows; the zero values keep the
	// original conditions as they were.

	// TransportTable puts the condition in the report's table of the
	// transport's targets (rates told wrong or not at all, a thin return
	// link, a capacity drop, an outage).
	TransportTable bool
	// AdaptationTable puts the condition in the report's table of links
	// the transport must adapt to untold (no rates configured, rain fade,
	// LEO, shared links).
	AdaptationTable bool
	// DownSchedule changes the download rate at offsets from the start of
	// the transfer (not of the emulator: setup time varies by contender).
	DownSchedule []linkemu.RateStep
	// Outage takes both directions down at an offset from the start of the
	// transfer; zero = none.
	Outage linkemu.Outage
	// MinDuration is the shortest transfer that shows the condition (an
	// outage needs time before and after it); longer --duration wins.
	MinDuration time.Duration
	// PeerRateScale multiplies the rates scpsvpn's [peer.link] states (a
	// wrong guess); 0 = the true rates. Kernel contenders are unaffected.
	PeerRateScale float64
	// PeerNoRate leaves up and down out of [peer.link] altogether.
	PeerNoRate bool
	// PeerLossAuto writes loss = "auto" into [peer.link].
	PeerLossAuto bool
	// BDPQueue sizes each direction's drop-tail queue to one
	// bandwidth-delay product of its own highest rate (at least
	// minQueuePackets packets), as a modem would, instead of the
	// emulator's 64 KiB floor: a 64 kbit/s return link would otherwise
	// hold 8 s of ACKs, and an overshooting sender would never overflow.
	BDPQueue bool
	// Second is a second link beside this one (TwoLinkConditions, the
	// multipath workload): its own rates, RTT, loss and outages.
	Second *Condition
	// SecondBackup makes the second link a backup path (backup = true):
	// it carries data only while the first does not work.
	SecondBackup bool
}

// minQueuePackets is the floor of a BDP-sized queue, so a thin link still
// holds a small burst.
const minQueuePackets = 8

// MSS and MTU of the underlay; the payload capacity of a link counts the TCP
// payload of a full-size packet (1460 of 1500 bytes), as a user would expect
// a file download to reach at best.
const (
	underlayMTU = 1500
	fullPayload = 1460
)

// Conditions is the built-in table, in report order.
var Conditions = []Condition{
	{Name: "B1", Desc: "paper B1: modems cabled", Down: 1_500_000, Up: 1_500_000, RTT: 50 * time.Millisecond},
	{Name: "C1", Desc: "paper C1: GEO satellite, no loss", Down: 1_500_000, Up: 1_500_000, RTT: 300 * time.Millisecond},
	{Name: "C2", Desc: "paper C2: GEO satellite, 3% loss", Down: 1_500_000, Up: 1_500_000, RTT: 300 * time.Millisecond, LossDown: 0.03, TransportTable: true},
	{Name: "GEO", Desc: "GEO broadband, lossy", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond, LossDown: 0.01, LossUp: 0.001, TransportTable: true},
	{Name: "LEO", Desc: "LEO constellation, handover outages", Down: 100_000_000, Up: 20_000_000, RTT: 40 * time.Millisecond,
		LossDown: 0.005, LossUp: 0.005, OutageEvery: linkemu.Periodic{Every: 15 * time.Second, Duration: 100 * time.Millisecond}},
	{Name: "GEO-10/2", Desc: "draft-kuhn-quic-4-sat GEO 10/2", Down: 10_000_000, Up: 2_000_000, RTT: 650 * time.Millisecond},
	{Name: "GEO-50/0.5", Desc: "draft-kuhn-quic-4-sat GEO 50/0.5, congested uplink", Down: 50_000_000, Up: 500_000, RTT: 650 * time.Millisecond},

	// The transport's targets: rates told wrong or not at all, a thin
	// return link, a capacity drop, an outage; C2 and GEO above are part
	// of the first target and also appear in its table.
	{Name: "ASYM", Desc: "64 kbit/s return link", Down: 20_000_000, Up: 64_000, RTT: 600 * time.Millisecond, TransportTable: true, BDPQueue: true},
	{Name: "C2-2X", Desc: "C2, scpsvpn told twice the rates", Down: 1_500_000, Up: 1_500_000, RTT: 300 * time.Millisecond, LossDown: 0.03,
		TransportTable: true, BDPQueue: true, PeerRateScale: 2, PeerLossAuto: true},
	{Name: "GEO-2X", Desc: "GEO, scpsvpn told twice the rates", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond, LossDown: 0.01, LossUp: 0.001,
		TransportTable: true, BDPQueue: true, PeerRateScale: 2, PeerLossAuto: true},
	{Name: "C2-NORATE", Desc: "C2, scpsvpn told no rates", Down: 1_500_000, Up: 1_500_000, RTT: 300 * time.Millisecond, LossDown: 0.03,
		TransportTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	{Name: "GEO-NORATE", Desc: "GEO, scpsvpn told no rates", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond, LossDown: 0.01, LossUp: 0.001,
		TransportTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	{Name: "DROP", Desc: "capacity drops mid-transfer, scpsvpn told 50 Mbit/s", Down: 50_000_000, Up: 5_000_000, RTT: 600 * time.Millisecond,
		TransportTable: true, BDPQueue: true, DownSchedule: []linkemu.RateStep{{At: 10 * time.Second, Rate: 10_000_000}}},
	{Name: "OUTAGE", Desc: "GEO 10/2 with a 30 s outage mid-transfer", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond,
		TransportTable: true, BDPQueue: true, Outage: linkemu.Outage{Start: 10 * time.Second, Duration: 30 * time.Second}, MinDuration: 60 * time.Second},

	// Links to adapt to untold: no configuration needed (C2-NORATE and
	// GEO-NORATE above are part of it), a configured rate as a ceiling (GEO-2X above: told
	// 20 Mbit/s on 10), the field's LEO (LEO above, told), and links
	// shared by two flows (the share-* workloads run on BEAM*).
	{Name: "GEO-50/0.5-NORATE", Desc: "draft-kuhn-quic-4-sat GEO 50/0.5, scpsvpn told no rates", Down: 50_000_000, Up: 500_000, RTT: 650 * time.Millisecond,
		AdaptationTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	{Name: "ASYM-NORATE", Desc: "64 kbit/s return link, scpsvpn told no rates", Down: 20_000_000, Up: 64_000, RTT: 600 * time.Millisecond,
		AdaptationTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	{Name: "GEO-250/3-NORATE", Desc: "draft-kuhn-quic-4-sat high-rate GEO 250/3, scpsvpn told no rates", Down: 250_000_000, Up: 3_000_000, RTT: 650 * time.Millisecond,
		AdaptationTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	{Name: "GEO-250/3-LOSS-NORATE", Desc: "GEO 250/3 with 1% loss each way, scpsvpn told no rates", Down: 250_000_000, Up: 3_000_000, RTT: 650 * time.Millisecond,
		LossDown: 0.01, LossUp: 0.01, AdaptationTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	{Name: "GEO-250/3-LOSS", Desc: "GEO 250/3 with 1% loss each way, told", Down: 250_000_000, Up: 3_000_000, RTT: 650 * time.Millisecond,
		LossDown: 0.01, LossUp: 0.01, AdaptationTable: true, BDPQueue: true, PeerLossAuto: true},
	{Name: "FADE", Desc: "rain fade, 50 -> 10 -> 50 Mbit/s, scpsvpn told 50", Down: 50_000_000, Up: 5_000_000, RTT: 600 * time.Millisecond,
		AdaptationTable: true, BDPQueue: true, PeerLossAuto: true, MinDuration: 40 * time.Second,
		DownSchedule: []linkemu.RateStep{{At: 10 * time.Second, Rate: 10_000_000}, {At: 25 * time.Second, Rate: 50_000_000}}},
	// The fade as measured elsewhere: told 50 Mbit/s, the rate falls to
	// 10 Mbit/s 5 s into a 60 MB download (about 33 s) and stays there;
	// the whole run's share of the limit is the figure.
	{Name: "FADE-HOLD", Desc: "rain fade that holds, 50 -> 10 Mbit/s 5 s in, scpsvpn told 50", Down: 50_000_000, Up: 5_000_000, RTT: 600 * time.Millisecond,
		AdaptationTable: true, BDPQueue: true, PeerLossAuto: true, MinDuration: 33 * time.Second,
		DownSchedule: []linkemu.RateStep{{At: 5 * time.Second, Rate: 10_000_000}}},
	{Name: "GEO-10/2-LOSS-NORATE", Desc: "draft-kuhn-quic-4-sat GEO 10/2 with 0.5% loss each way, scpsvpn told no rates", Down: 10_000_000, Up: 2_000_000, RTT: 650 * time.Millisecond,
		LossDown: 0.005, LossUp: 0.005, AdaptationTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	{Name: "LEO-NORATE", Desc: "LEO, scpsvpn told no rates", Down: 100_000_000, Up: 20_000_000, RTT: 40 * time.Millisecond,
		LossDown: 0.005, LossUp: 0.005, OutageEvery: linkemu.Periodic{Every: 15 * time.Second, Duration: 100 * time.Millisecond},
		AdaptationTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	// Clients that stop reading or read slowly (--workload stalled) on
	// GEO-10/2-CLEAN-NORATE below, and told the rates here.
	{Name: "GEO-10/2-CLEAN", Desc: "GEO 10/2 Mbit/s, 600 ms, lossless", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond,
		BDPQueue: true, PeerLossAuto: true},
	{Name: "BEAM", Desc: "one GEO beam for the shared-link workloads, 1% loss", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond,
		LossDown: 0.01, LossUp: 0.001, AdaptationTable: true, BDPQueue: true, PeerLossAuto: true, MinDuration: shareMinDuration},
	// Careful resume's path (the resume workload): GEO 10/2, lossless,
	// untold, so what the tunnel learned is all it knows.
	{Name: "GEO-10/2-CLEAN-NORATE", Desc: "GEO 10/2 Mbit/s, 600 ms, lossless, scpsvpn told no rates", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond,
		AdaptationTable: true, BDPQueue: true, PeerNoRate: true, PeerLossAuto: true},
	{Name: "BEAM-CLEAN", Desc: "the beam without random loss (kernel TCP can fill it)", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond,
		AdaptationTable: true, BDPQueue: true, PeerLossAuto: true, MinDuration: shareMinDuration},
}

// ConditionNames lists the built-in single-link conditions' names (what
// "all" selects; TwoLinkConditions are named apart).
func ConditionNames() []string {
	names := make([]string, len(Conditions))
	for i, c := range Conditions {
		names[i] = c.Name
	}
	return names
}

// SelectConditions picks conditions by a comma-separated, case-insensitive
// list of names ("all" or "" = every one), in the order given, without
// duplicates.
func SelectConditions(list string) ([]Condition, error) {
	if t := strings.TrimSpace(list); t == "" || strings.EqualFold(t, "all") {
		return append([]Condition(nil), Conditions...), nil
	}
	var out []Condition
	seen := map[string]bool{}
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		c, ok := conditionByName(item)
		if !ok {
			return nil, fmt.Errorf("unknown condition %q: use one of %s (or all), or with --workload %s %s", item, strings.Join(ConditionNames(), ", "), WorkloadMultipath, strings.Join(twoLinkNames(), ", "))
		}
		if !seen[c.Name] {
			seen[c.Name] = true
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no condition selected: use one of %s (or all)", strings.Join(ConditionNames(), ", "))
	}
	return out, nil
}

func conditionByName(name string) (Condition, bool) {
	for _, c := range slices.Concat(Conditions, TwoLinkConditions) {
		if strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return Condition{}, false
}

// Validate checks a condition built from flags.
func (c Condition) Validate() error {
	switch {
	case c.Down <= 0 || c.Up <= 0:
		return fmt.Errorf("condition %s: rates must be positive (got %s down, %s up)", c.Name, configs.FormatRate(c.Down), configs.FormatRate(c.Up))
	case c.RTT <= 0 || c.RTT > time.Minute:
		return fmt.Errorf("condition %s: RTT %v out of range (0, 1m]", c.Name, c.RTT)
	case c.LossDown < 0 || c.LossDown >= 1 || c.LossUp < 0 || c.LossUp >= 1:
		return fmt.Errorf("condition %s: loss must be in [0, 1)", c.Name)
	}
	if c.PeerRateScale < 0 || (c.PeerRateScale > 0 && c.PeerNoRate) {
		return fmt.Errorf("condition %s: the peer rate scale must be positive and needs rates", c.Name)
	}
	if w := c.Outage; w != (linkemu.Outage{}) && c.MinDuration < w.Start+w.Duration {
		return fmt.Errorf("condition %s: a minimum duration of %v ends before the outage does", c.Name, c.MinDuration)
	}
	if c.Second != nil {
		if err := c.Second.Validate(); err != nil {
			return fmt.Errorf("condition %s, its second link: %w", c.Name, err)
		}
	}
	o := c.LinkOptions(1)
	o.DevA, o.DevB = "a", "b" // Validate wants names; the testbed sets the real ones
	if err := o.Validate(); err != nil {
		return fmt.Errorf("condition %s: %w", c.Name, err)
	}
	return nil
}

// PayloadCapacity is the download's best possible goodput in bytes per
// second: the rate in bytes times the payload share of a full packet.
func (c Condition) PayloadCapacity() float64 {
	return float64(c.Down) / 8 * fullPayload / underlayMTU
}

// LinkOptions returns the emulator model of the condition (namespaces,
// devices and addresses are the testbed's to fill in). seed makes the loss
// draws repeatable, so every contender meets the same loss pattern for the
// same packet sequence. The timed events are placed as if the transfer
// started with the emulator; LinkOptionsAt shifts them.
func (c Condition) LinkOptions(seed uint64) linkemu.Options { return c.LinkOptionsAt(seed, 0) }

// LinkOptionsAt is LinkOptions for a transfer that starts lead after the
// emulator: the emulator's schedules count from its own start, so the
// rate change and the outage move by lead.
func (c Condition) LinkOptionsAt(seed uint64, lead time.Duration) linkemu.Options {
	half := c.RTT / 2
	o := linkemu.Options{
		MTU:         underlayMTU,
		Fwd:         linkemu.Dir{Rate: c.Up, Delay: half, Loss: c.LossUp},
		Ret:         linkemu.Dir{Rate: c.Down, Delay: c.RTT - half, Loss: c.LossDown},
		OutageEvery: c.OutageEvery,
		Seed:        seed,
	}
	for _, s := range c.DownSchedule {
		o.Ret.RateSchedule = append(o.Ret.RateSchedule, linkemu.RateStep{At: s.At + lead, Rate: s.Rate})
	}
	if c.Outage != (linkemu.Outage{}) {
		o.Outages = []linkemu.Outage{{Start: c.Outage.Start + lead, Duration: c.Outage.Duration}}
	}
	if c.BDPQueue {
		o.Fwd.Queue = bdpQueue(c.Up, nil, c.RTT)
		o.Ret.Queue = bdpQueue(c.Down, c.DownSchedule, c.RTT)
	}
	return o
}

// bdpQueue is one bandwidth-delay product at the highest rate a direction
// runs, at least minQueuePackets full packets.
func bdpQueue(rate int64, schedule []linkemu.RateStep, rtt time.Duration) int64 {
	for _, s := range schedule {
		rate = max(rate, s.Rate)
	}
	return max(int64(float64(rate)/8*rtt.Seconds()), minQueuePackets*underlayMTU)
}

// Timed reports whether the condition has events at offsets from the
// start of the transfer, so the run must start the transfer on the
// emulator's clock.
func (c Condition) Timed() bool {
	return len(c.DownSchedule) > 0 || c.Outage != (linkemu.Outage{})
}

// RunDuration is the transfer length for a requested duration: at least
// the condition's minimum.
func (c Condition) RunDuration(requested time.Duration) time.Duration {
	return max(requested, c.MinDuration)
}

// DownRateAt is the download's link rate in force at offset t from the
// start of the transfer.
func (c Condition) DownRateAt(t time.Duration) int64 {
	r := c.Down
	for _, s := range c.DownSchedule {
		if t >= s.At {
			r = s.Rate
		}
	}
	return r
}

// PayloadLimit is the payload a download can at best deliver between
// offsets from and to of the transfer: the rate in force over the time the
// link is up, times the payload share of a full packet, times the share of
// packets the random loss lets through (the "payload limit" the targets
// are stated against: rate/8 x 1460/1500 x (1 - loss)).
func (c Condition) PayloadLimit(from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	// Cut [from, to) at every rate change and outage edge.
	cuts := []time.Duration{from, to}
	for _, s := range c.DownSchedule {
		cuts = append(cuts, s.At)
	}
	if w := c.Outage; w != (linkemu.Outage{}) {
		cuts = append(cuts, w.Start, w.Start+w.Duration)
	}
	slices.Sort(cuts)
	var bits float64
	for i := 0; i+1 < len(cuts); i++ {
		a, b := max(cuts[i], from), min(cuts[i+1], to)
		if b <= a || c.outageAt(a) {
			continue
		}
		bits += float64(c.DownRateAt(a)) * (b - a).Seconds()
	}
	return bits / 8 * fullPayload / underlayMTU * (1 - c.LossDown)
}

// outageAt reports whether the condition's outage covers offset t.
func (c Condition) outageAt(t time.Duration) bool {
	w := c.Outage
	return w != (linkemu.Outage{}) && t >= w.Start && t < w.Start+w.Duration
}

// PeerLinks returns the [peer.link] lines each site's endpoint gets: what a
// user knows of the link (rates each way as seen from that site, and the
// RTT), plus the congestion controller when one is chosen ("" = the
// endpoint's default).
func (c Condition) PeerLinks(congestion string) (siteA, siteB string) {
	scale := c.PeerRateScale
	if scale == 0 {
		scale = 1
	}
	line := func(up, down int64) string {
		var s string
		if !c.PeerNoRate {
			s = fmt.Sprintf("up = %q\ndown = %q\n", configs.FormatRate(int64(float64(up)*scale)), configs.FormatRate(int64(float64(down)*scale)))
		}
		s += fmt.Sprintf("rtt = %q\n", c.RTT.String())
		if c.PeerLossAuto {
			s += "loss = \"auto\"\n"
		}
		if congestion != "" {
			s += fmt.Sprintf("congestion = %q\n", congestion)
		}
		return s
	}
	return line(c.Up, c.Down), line(c.Down, c.Up)
}

// Summary describes the condition in one line, e.g.
// "1.5Mbit down / 1.5Mbit up, RTT 300ms, loss 3% down".
func (c Condition) Summary() string {
	s := fmt.Sprintf("%s down / %s up, RTT %v", configs.FormatRate(c.Down), configs.FormatRate(c.Up), c.RTT)
	switch {
	case c.LossDown > 0 && c.LossUp > 0 && c.LossDown == c.LossUp:
		s += ", loss " + pct(c.LossDown) + " each way"
	case c.LossDown > 0 || c.LossUp > 0:
		var parts []string
		if c.LossDown > 0 {
			parts = append(parts, pct(c.LossDown)+" down")
		}
		if c.LossUp > 0 {
			parts = append(parts, pct(c.LossUp)+" up")
		}
		s += ", loss " + strings.Join(parts, ", ")
	}
	if c.OutageEvery != (linkemu.Periodic{}) {
		s += fmt.Sprintf(", %v outage every %v", c.OutageEvery.Duration, c.OutageEvery.Every)
	}
	for _, st := range c.DownSchedule {
		s += fmt.Sprintf(", down %s from %v", configs.FormatRate(st.Rate), st.At)
	}
	if w := c.Outage; w != (linkemu.Outage{}) {
		s += fmt.Sprintf(", %v outage at %v", w.Duration, w.Start)
	}
	switch {
	case c.PeerNoRate:
		s += "; scpsvpn told no rates"
	case c.PeerRateScale > 0 && c.PeerRateScale != 1:
		s += fmt.Sprintf("; scpsvpn told %gx the rates", c.PeerRateScale)
	}
	if c.Second != nil {
		s += "; beside it " + c.Second.Summary()
		if c.SecondBackup {
			s += ", a backup"
		}
	}
	return s
}

// pct prints a probability as a percentage without trailing zeros.
func pct(p float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", p*100), "0"), ".") + "%"
}
