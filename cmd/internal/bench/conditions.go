// Package bench measures scpsvpn against kernel TCP through the project's
// emulated satellite link: a matrix of link conditions times contenders,
// each run on a fresh two-site testbed, with goodput, time to first byte,
// request/response latency under load and link overhead, written as a
// report directory (report.md, results.json, plots). `scpsvpn demo` runs
// the same machinery for one condition and two contenders.
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
	"strings"
	"time"

	"scpsvpn/cmd/internal/linkemu"
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
}

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
	{Name: "C2", Desc: "paper C2: GEO satellite, 3% loss", Down: 1_500_000, Up: 1_500_000, RTT: 300 * time.Millisecond, LossDown: 0.03},
	{Name: "GEO", Desc: "GEO broadband, lossy", Down: 10_000_000, Up: 2_000_000, RTT: 600 * time.Millisecond, LossDown: 0.01, LossUp: 0.001},
	{Name: "LEO", Desc: "LEO constellation, handover outages", Down: 100_000_000, Up: 20_000_000, RTT: 40 * time.Millisecond,
		LossDown: 0.005, LossUp: 0.005, OutageEvery: linkemu.Periodic{Every: 15 * time.Second, Duration: 100 * time.Millisecond}},
	{Name: "GEO-10/2", Desc: "draft-kuhn-quic-4-sat GEO 10/2", Down: 10_000_000, Up: 2_000_000, RTT: 650 * time.Millisecond},
	{Name: "GEO-50/0.5", Desc: "draft-kuhn-quic-4-sat GEO 50/0.5, congested uplink", Down: 50_000_000, Up: 500_000, RTT: 650 * time.Millisecond},
}

// ConditionNames lists the built-in conditions' names.
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
			return nil, fmt.Errorf("unknown condition %q: use one of %s (or all)", item, strings.Join(ConditionNames(), ", "))
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
	for _, c := range Conditions {
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
		return fmt.Errorf("condition %s: rates must be positive (got %s down, %s up)", c.Name, linkemu.FormatRate(c.Down), linkemu.FormatRate(c.Up))
	case c.RTT <= 0 || c.RTT > time.Minute:
		return fmt.Errorf("condition %s: RTT %v out of range (0, 1m]", c.Name, c.RTT)
	case c.LossDown < 0 || c.LossDown >= 1 || c.LossUp < 0 || c.LossUp >= 1:
		return fmt.Errorf("condition %s: loss must be in [0, 1)", c.Name)
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
// same packet sequence.
func (c Condition) LinkOptions(seed uint64) linkemu.Options {
	half := c.RTT / 2
	return linkemu.Options{
		MTU:         underlayMTU,
		Fwd:         linkemu.Dir{Rate: c.Up, Delay: half, Loss: c.LossUp},
		Ret:         linkemu.Dir{Rate: c.Down, Delay: c.RTT - half, Loss: c.LossDown},
		OutageEvery: c.OutageEvery,
		Seed:        seed,
	}
}

// PeerLinks returns the [peer.link] lines each site's endpoint gets: what a
// user knows of the link (rates each way as seen from that site, and the
// RTT), plus the congestion controller when one is chosen ("" = the
// endpoint's default).
func (c Condition) PeerLinks(congestion string) (siteA, siteB string) {
	line := func(up, down int64) string {
		s := fmt.Sprintf("up = %q\ndown = %q\nrtt = %q\n", linkemu.FormatRate(up), linkemu.FormatRate(down), c.RTT.String())
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
	s := fmt.Sprintf("%s down / %s up, RTT %v", linkemu.FormatRate(c.Down), linkemu.FormatRate(c.Up), c.RTT)
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
	return s
}

// pct prints a probability as a percentage without trailing zeros.
func pct(p float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", p*100), "0"), ".") + "%"
}
