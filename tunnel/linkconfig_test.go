package tunnel

import (
	"strings"
	"testing"
	"time"

	"scpsvpn/configs"
	"scpsvpn/scps"
	"scpsvpn/scps/settings"
)

// linkFile is a one-peer configuration with the given [peer.link] table.
func linkFile(link configs.Link) configs.File {
	return configs.File{
		Interface: configs.Interface{Name: "scps0", PrivateKeyFile: "/dev/null"},
		Peers: []configs.Peer{{
			Name:      "site-b",
			PublicKey: "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=",
			Subnets:   []string{"10.2.0.0/24"},
			Link:      link,
		}},
	}
}

// transportConfig is the association's config for a link table configs
// accepted, as sessionConfig builds it.
func transportConfig(t *testing.T, link configs.Link) scps.Config {
	t.Helper()
	f := linkFile(link)
	c, err := f.Validate()
	if err != nil {
		t.Fatalf("configs refuses %+v: %v", link, err)
	}
	cfg := scps.DefaultConfig()
	applyLink(&cfg, c.Peers[0].Link)
	return cfg
}

// TestLinkKeysMatchTheTransport ties what configs accepts to what the
// association accepts (scps.Config.Validate) through the mapping the
// endpoint uses (applyLink): every controller with every loss mode and
// their defaults, and each bound of a link key: the value at the bound
// passes both, the one just past it is refused by both.
func TestLinkKeysMatchTheTransport(t *testing.T) {
	def := transportConfig(t, configs.Link{})
	if want := scps.DefaultConfig(); def.Congestion != want.Congestion || def.Loss != want.Loss {
		t.Errorf("configs' defaults congestion %q loss %q; the transport's %q %q", def.Congestion, def.Loss, want.Congestion, want.Loss)
	}
	rate := configs.FormatRate(settings.MinRate)
	for _, m := range configs.CongestionModes {
		for _, l := range configs.LossModes {
			cfg := transportConfig(t, configs.Link{Congestion: m, Loss: l, Up: rate})
			if err := cfg.Validate(); err != nil {
				t.Errorf("congestion %q, loss %q: %v", m, l, err)
			}
		}
	}
	dur := func(d time.Duration) string { return d.String() }
	const ns = time.Nanosecond
	for _, tc := range []struct {
		key            string
		inside, beyond configs.Link
		past           func(*scps.Config) // the step past the bound, given to the transport
	}{
		{"up", configs.Link{Up: rate}, configs.Link{Up: configs.FormatRate(settings.MinRate - 1)},
			func(c *scps.Config) { c.SendRate = settings.MinRate - 1 }},
		{"down", configs.Link{Down: rate}, configs.Link{Down: configs.FormatRate(settings.MinRate - 1)},
			func(c *scps.Config) { c.RecvRate = settings.MinRate - 1 }},
		{"window", configs.Link{Window: configs.FormatSize(settings.MinStreamWindow)}, configs.Link{Window: configs.FormatSize(settings.MinStreamWindow - 1)},
			func(c *scps.Config) { c.StreamWindow = settings.MinStreamWindow - 1 }},
		{"window", configs.Link{Window: configs.FormatSize(settings.MaxStreamWindow)}, configs.Link{Window: configs.FormatSize(settings.MaxStreamWindow + 1)},
			func(c *scps.Config) { c.StreamWindow = settings.MaxStreamWindow + 1 }},
		{"rtt", configs.Link{RTT: dur(settings.MinRTT)}, configs.Link{RTT: dur(settings.MinRTT - ns)},
			func(c *scps.Config) { c.InitialRTT = settings.MinRTT - ns }},
		{"rtt", configs.Link{RTT: dur(settings.MaxRTT)}, configs.Link{RTT: dur(settings.MaxRTT + ns)},
			func(c *scps.Config) { c.InitialRTT = settings.MaxRTT + ns }},
		{"outage_after", configs.Link{OutageAfter: dur(settings.MinOutageAfter)}, configs.Link{OutageAfter: dur(settings.MinOutageAfter - ns)},
			func(c *scps.Config) { c.OutageAfter = settings.MinOutageAfter - ns }},
		{"outage_after", configs.Link{OutageAfter: dur(settings.MaxOutageAfter), MaxOutage: dur(settings.MaxOutageAfter)},
			configs.Link{OutageAfter: dur(settings.MaxOutageAfter + ns), MaxOutage: dur(settings.MaxOutageAfter + ns)},
			func(c *scps.Config) {
				c.OutageAfter, c.MaxOutage = settings.MaxOutageAfter+ns, settings.MaxOutageAfter+ns
			}},
		{"probe_interval", configs.Link{ProbeInterval: dur(settings.MinProbeInterval)}, configs.Link{ProbeInterval: dur(settings.MinProbeInterval - ns)},
			func(c *scps.Config) { c.ProbeInterval = settings.MinProbeInterval - ns }},
		{"probe_interval", configs.Link{ProbeInterval: dur(settings.MaxProbeInterval)}, configs.Link{ProbeInterval: dur(settings.MaxProbeInterval + ns)},
			func(c *scps.Config) { c.ProbeInterval = settings.MaxProbeInterval + ns }},
		{"max_outage", configs.Link{OutageAfter: dur(settings.MinOutageAfter), MaxOutage: dur(settings.MinMaxOutage)},
			configs.Link{OutageAfter: dur(settings.MinOutageAfter), MaxOutage: dur(settings.MinMaxOutage - ns)},
			func(c *scps.Config) { c.MaxOutage = settings.MinMaxOutage - ns }},
		{"max_outage", configs.Link{MaxOutage: dur(settings.MaxMaxOutage)}, configs.Link{MaxOutage: dur(settings.MaxMaxOutage + ns)},
			func(c *scps.Config) { c.MaxOutage = settings.MaxMaxOutage + ns }},
	} {
		cfg := transportConfig(t, tc.inside)
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s at its bound (%+v): the transport refuses it: %v", tc.key, tc.inside, err)
		}
		f := linkFile(tc.beyond)
		if _, err := f.Validate(); err == nil || !strings.Contains(err.Error(), ".link."+tc.key) {
			t.Errorf("%s past its bound (%+v): configs says %v, want an error naming the key", tc.key, tc.beyond, err)
		}
		tc.past(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s past its bound: the transport takes %+v", tc.key, cfg)
		}
	}
}

// TestInterfaceKeysMatchTheTransport: the largest memory budget and flow
// count configs accepts give an association config the transport takes.
func TestInterfaceKeysMatchTheTransport(t *testing.T) {
	f := linkFile(configs.Link{})
	f.Interface.Memory = configs.FormatSize(settings.MaxMemory)
	f.Interface.MaxFlows = settings.MaxStreams
	c, err := f.Validate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := scps.DefaultConfig()
	cfg.Memory = splitPeerMemory(c.Memory, 1).assoc
	cfg.MaxStreams = peerStreams(c.MaxFlows)
	if err := cfg.Validate(); err != nil {
		t.Errorf("memory %d, max_flows %d: %v", c.Memory, c.MaxFlows, err)
	}
}

// TestTailParityTold: both sites' handshakes carry the tail parity bit
// (capTailParity), so each association sends parities at a burst's end
// and keeps its newest payloads for the peer's (scps/parity.go).
func TestTailParityTold(t *testing.T) {
	_, a, b := quicSites(t, "")
	for _, s := range [][2]*site{{a, b}, {b, a}} {
		if !s[0].assoc(s[1]).cur.Load().sess.Config().TailParity {
			t.Errorf("%s: the association toward %s sends no parity", s[0].name, s[1].name)
		}
	}
}
