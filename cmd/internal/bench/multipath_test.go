package bench

import (
	"strings"
	"testing"
	"time"
)

// TestTwoLinkConditions: the two-link conditions are the links,
// valid, and their testbed gives each path its own emulator model and
// [peer.path.link] lines.
func TestTwoLinkConditions(t *testing.T) {
	want := map[string][2]time.Duration{"GEO+CELL": {600 * time.Millisecond, 60 * time.Millisecond}, "LEO+GEO": {40 * time.Millisecond, 600 * time.Millisecond}}
	for _, c := range TwoLinkConditions {
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
		w, ok := want[c.Name]
		if !ok || c.Second == nil || c.RTT != w[0] || c.Second.RTT != w[1] {
			t.Errorf("%s: RTTs %v / %v, want %v", c.Name, c.RTT, c.Second, w)
			continue
		}
		cfg := multipathConfig(RunConfig{Condition: c, Seed: 7, Contender: SCPSContender("")})
		if !cfg.TwoPaths || cfg.Link.Ret.Delay+cfg.Link.Fwd.Delay != w[0] || cfg.Link2.Ret.Delay+cfg.Link2.Fwd.Delay != w[1] || cfg.Link.Seed == cfg.Link2.Seed {
			t.Errorf("%s: testbed links %+v / %+v", c.Name, cfg.Link, cfg.Link2)
		}
		for i, rtt := range w {
			if !strings.Contains(cfg.PathLinks[i], "rtt = \""+rtt.String()+"\"") {
				t.Errorf("%s: path %d's link lines %q, want rtt %v", c.Name, i, cfg.PathLinks[i], rtt)
			}
		}
		if !strings.Contains(c.Summary(), "beside it") {
			t.Errorf("%s: summary %q names one link", c.Name, c.Summary())
		}
	}
	if LEO := TwoLinkConditions[1]; LEO.OutageEvery.Every != 15*time.Second || LEO.OutageEvery.Duration != 50*time.Millisecond {
		t.Errorf("LEO+GEO's cuts: %+v", LEO.OutageEvery)
	}
}
