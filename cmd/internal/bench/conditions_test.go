package bench

// Tests of the condition table, its selection, and its translation into the
// emulator's options and the endpoints' [peer.link] tables (checked by the
// configs package's own parser, as an endpoint would read them).

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/configs"
)

func TestConditionTable(t *testing.T) {
	want := map[string]struct {
		down, up int64
		rtt      time.Duration
		lossDown float64
	}{
		"B1":         {1_500_000, 1_500_000, 50 * time.Millisecond, 0},
		"C1":         {1_500_000, 1_500_000, 300 * time.Millisecond, 0},
		"C2":         {1_500_000, 1_500_000, 300 * time.Millisecond, 0.03},
		"GEO":        {10_000_000, 2_000_000, 600 * time.Millisecond, 0.01},
		"LEO":        {100_000_000, 20_000_000, 40 * time.Millisecond, 0.005},
		"GEO-10/2":   {10_000_000, 2_000_000, 650 * time.Millisecond, 0},
		"GEO-50/0.5": {50_000_000, 500_000, 650 * time.Millisecond, 0},
		"ASYM":       {20_000_000, 64_000, 600 * time.Millisecond, 0},
		"C2-2X":      {1_500_000, 1_500_000, 300 * time.Millisecond, 0.03},
		"GEO-2X":     {10_000_000, 2_000_000, 600 * time.Millisecond, 0.01},
		"C2-NORATE":  {1_500_000, 1_500_000, 300 * time.Millisecond, 0.03},
		"GEO-NORATE": {10_000_000, 2_000_000, 600 * time.Millisecond, 0.01},
		"DROP":       {50_000_000, 5_000_000, 600 * time.Millisecond, 0},
		"OUTAGE":     {10_000_000, 2_000_000, 600 * time.Millisecond, 0},

		"GEO-50/0.5-NORATE":     {50_000_000, 500_000, 650 * time.Millisecond, 0},
		"ASYM-NORATE":           {20_000_000, 64_000, 600 * time.Millisecond, 0},
		"GEO-250/3-NORATE":      {250_000_000, 3_000_000, 650 * time.Millisecond, 0},
		"GEO-250/3-LOSS-NORATE": {250_000_000, 3_000_000, 650 * time.Millisecond, 0.01},
		"GEO-250/3-LOSS":        {250_000_000, 3_000_000, 650 * time.Millisecond, 0.01},
		"FADE":                  {50_000_000, 5_000_000, 600 * time.Millisecond, 0},
		"FADE-HOLD":             {50_000_000, 5_000_000, 600 * time.Millisecond, 0},
		"GEO-10/2-LOSS-NORATE":  {10_000_000, 2_000_000, 650 * time.Millisecond, 0.005},
		"LEO-NORATE":            {100_000_000, 20_000_000, 40 * time.Millisecond, 0.005},
		"BEAM":                  {10_000_000, 2_000_000, 600 * time.Millisecond, 0.01},
		"GEO-10/2-CLEAN-NORATE": {10_000_000, 2_000_000, 600 * time.Millisecond, 0},
		"BEAM-CLEAN":            {10_000_000, 2_000_000, 600 * time.Millisecond, 0},
		"GEO-10/2-CLEAN":        {10_000_000, 2_000_000, 600 * time.Millisecond, 0},
	}
	if len(Conditions) != len(want) {
		t.Fatalf("%d conditions, want %d", len(Conditions), len(want))
	}
	for _, c := range Conditions {
		w, ok := want[c.Name]
		if !ok {
			t.Errorf("unexpected condition %s", c.Name)
			continue
		}
		if c.Down != w.down || c.Up != w.up || c.RTT != w.rtt || c.LossDown != w.lossDown {
			t.Errorf("%s = %+v, want %+v", c.Name, c, w)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
	}
	geo, _ := conditionByName("GEO")
	if geo.LossUp != 0.001 {
		t.Errorf("GEO return loss %v, want 0.1%%", geo.LossUp)
	}
	leo, _ := conditionByName("LEO")
	if leo.OutageEvery.Every != 15*time.Second || leo.OutageEvery.Duration <= 0 {
		t.Errorf("LEO outages %+v, want a short one every 15s", leo.OutageEvery)
	}
}

func TestPayloadCapacity(t *testing.T) {
	c, _ := conditionByName("C1")
	// 1.5 Mbit/s = 187500 B/s of packets, 1460/1500 of it payload.
	if got, want := c.PayloadCapacity(), 187500.0*1460/1500; got != want {
		t.Errorf("capacity %v, want %v", got, want)
	}
}

func TestSelectConditions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // names joined by ","; "" = error
	}{
		{"", strings.Join(ConditionNames(), ",")},
		{"all", strings.Join(ConditionNames(), ",")},
		{"ALL", strings.Join(ConditionNames(), ",")},
		{"c2", "C2"},
		{"C2, b1,C2", "C2,B1"},
		{"geo-50/0.5,leo", "GEO-50/0.5,LEO"},
		{"geo+cell", "GEO+CELL"},
		{"C3", ""},
		{" , ", ""},
	} {
		got, err := SelectConditions(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("SelectConditions(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("SelectConditions(%q): %v", tc.in, err)
			continue
		}
		var names []string
		for _, c := range got {
			names = append(names, c.Name)
		}
		if strings.Join(names, ",") != tc.want {
			t.Errorf("SelectConditions(%q) = %v, want %s", tc.in, names, tc.want)
		}
	}
	if _, err := SelectConditions("nope"); err == nil || !strings.Contains(err.Error(), "C2") {
		t.Errorf("the error should list the known conditions: %v", err)
	}
}

func TestLinkOptionsDirections(t *testing.T) {
	c, _ := conditionByName("GEO")
	o := c.LinkOptions(7)
	// The download goes B->A: the emulator's return direction.
	if o.Ret.Rate != 10_000_000 || o.Fwd.Rate != 2_000_000 {
		t.Errorf("rates fwd %d ret %d, want the download (10M) on ret", o.Fwd.Rate, o.Ret.Rate)
	}
	if o.Ret.Loss != 0.01 || o.Fwd.Loss != 0.001 {
		t.Errorf("loss fwd %v ret %v", o.Fwd.Loss, o.Ret.Loss)
	}
	if o.Fwd.Delay+o.Ret.Delay != 600*time.Millisecond {
		t.Errorf("delays %v + %v, want an RTT of 600ms", o.Fwd.Delay, o.Ret.Delay)
	}
	if o.Seed != 7 || o.MTU != 1500 {
		t.Errorf("seed %d mtu %d", o.Seed, o.MTU)
	}
	odd := Condition{Name: "x", Down: 1e6, Up: 1e6, RTT: 301 * time.Millisecond}
	if o := odd.LinkOptions(1); o.Fwd.Delay+o.Ret.Delay != odd.RTT {
		t.Errorf("an odd RTT must not lose a nanosecond: %v + %v", o.Fwd.Delay, o.Ret.Delay)
	}
}

// parseLink runs [peer.link] lines through the endpoint's config parser.
func parseLink(t *testing.T, lines string) configs.LinkConfig {
	t.Helper()
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	doc := "[interface]\nname = \"scps0\"\nlisten = \"10.200.0.1:4700\"\nprivate_key_file = \"/tmp/x.key\"\n" +
		"\n[[peer]]\nname = \"b\"\npublic_key = \"" + key + "\"\nsubnets = [\"10.2.0.0/24\"]\n\n[peer.link]\n" + lines
	cfg, err := configs.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("the endpoint rejects the link table: %v\n%s", err, doc)
	}
	return cfg.Peers[0].Link
}

func TestPeerLinks(t *testing.T) {
	c, _ := conditionByName("GEO-50/0.5")
	a, b := c.PeerLinks("vegas")
	la, lb := parseLink(t, a), parseLink(t, b)
	// Each site sees the link from its side: A sends up (0.5M), B sends
	// the download (50M).
	if la.Up != 500_000 || la.Down != 50_000_000 {
		t.Errorf("site A: up %d down %d", la.Up, la.Down)
	}
	if lb.Up != 50_000_000 || lb.Down != 500_000 {
		t.Errorf("site B: up %d down %d", lb.Up, lb.Down)
	}
	if la.RTT != 650*time.Millisecond || lb.RTT != 650*time.Millisecond {
		t.Errorf("RTTs %v %v", la.RTT, lb.RTT)
	}
	if la.Congestion != "vegas" || lb.Congestion != "vegas" {
		t.Errorf("congestion %q %q", la.Congestion, lb.Congestion)
	}
	a, _ = c.PeerLinks("")
	if strings.Contains(a, "congestion") {
		t.Errorf("no mode chosen, yet the table names one:\n%s", a)
	}
	if got := parseLink(t, a).Congestion; got != DefaultCongestion() {
		t.Errorf("default congestion %q, want %q", got, DefaultCongestion())
	}
}

func TestConditionValidate(t *testing.T) {
	for _, c := range []Condition{
		{Name: "zero rate", Up: 1e6, RTT: time.Second},
		{Name: "no rtt", Down: 1e6, Up: 1e6},
		{Name: "loss", Down: 1e6, Up: 1e6, RTT: time.Second, LossDown: 1},
		{Name: "outage", Down: 1e6, Up: 1e6, RTT: time.Second, OutageEvery: periodic(time.Second, 2*time.Second)},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", c.Name, c)
		}
	}
}

func TestSummary(t *testing.T) {
	for name, want := range map[string]string{
		"C2":  "1.5Mbit down / 1.5Mbit up, RTT 300ms, loss 3% down",
		"GEO": "10Mbit down / 2Mbit up, RTT 600ms, loss 1% down, 0.1% up",
		"LEO": "100Mbit down / 20Mbit up, RTT 40ms, loss 0.5% each way, 100ms outage every 15s",
		"B1":  "1.5Mbit down / 1.5Mbit up, RTT 50ms",
	} {
		c, _ := conditionByName(name)
		if got := c.Summary(); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

func periodic(every, d time.Duration) linkemu.Periodic {
	return linkemu.Periodic{Every: every, Duration: d}
}
