package testbed

// This file owns the configurations of a Star's endpoints: the hub's (one
// [[peer]] per spoke it serves, each owning its spoke's LANs) and each
// spoke's (one [[peer]], the hub, owning the hub's LANs and every other
// spoke's), rendered in the format the scpsvpn endpoint reads. The hub's can
// be rewritten with fewer spokes for a reload (SIGHUP) test.

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// starPeer is one [[peer]] table.
type starPeer struct {
	Name      string
	PublicKey string
	Endpoint  netip.AddrPort // invalid = no endpoint key
	Subnets   []netip.Prefix
}

// starConfig is everything one node's configuration says.
type starConfig struct {
	Listen    netip.AddrPort
	Interface string // extra raw [interface] lines
	Peers     []starPeer
}

// hubConfig is the hub's configuration serving the given spokes.
func (st *Star) hubConfig(spokes []int) starConfig {
	c := starConfig{
		Listen:    netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(st.Port)),
		Interface: st.cfg.HubInterface,
	}
	for _, i := range spokes {
		s := st.Spoke(i)
		c.Peers = append(c.Peers, starPeer{Name: s.Name, PublicKey: s.PublicKey, Endpoint: st.SpokeEndpoint(i),
			Subnets: st.peerSubnets(0, i, []netip.Prefix{s.LAN4, s.LAN6})})
	}
	return c
}

// peerSubnets applies StarConfig.PeerSubnets.
func (st *Star) peerSubnets(node, peer int, def []netip.Prefix) []netip.Prefix {
	if st.cfg.PeerSubnets == nil {
		return def
	}
	return st.cfg.PeerSubnets(node, peer, def)
}

// spokeConfig is spoke i's configuration: the hub is its only peer and owns
// everything else.
func (st *Star) spokeConfig(i int) starConfig {
	hub := st.Hub()
	p := starPeer{Name: hub.Name, PublicKey: hub.PublicKey, Endpoint: st.HubEndpoint(i),
		Subnets: []netip.Prefix{hub.LAN4, hub.LAN6}}
	for _, n := range st.Nodes[1:] {
		if n.Index != i {
			p.Subnets = append(p.Subnets, n.LAN4, n.LAN6)
		}
	}
	p.Subnets = st.peerSubnets(i, 0, p.Subnets)
	return starConfig{
		Listen:    netip.AddrPortFrom(st.Link(i).SpokeAddr.Addr(), uint16(st.Port)),
		Interface: st.cfg.SpokeInterface,
		Peers:     []starPeer{p},
	}
}

// WriteHubConfig rewrites the hub's configuration file with only the given
// spokes (1-based) as peers; send the hub SIGHUP (Signal) to apply it. An
// empty list is refused: the endpoint needs at least one peer.
func (st *Star) WriteHubConfig(spokes []int) error {
	if len(spokes) == 0 {
		return fmt.Errorf("testbed: the hub needs at least one spoke")
	}
	seen := map[int]bool{}
	for _, i := range spokes {
		if i < 1 || i >= len(st.Nodes) || seen[i] {
			return fmt.Errorf("testbed: spokes %v: each must be one of 1..%d, once", spokes, len(st.Nodes)-1)
		}
		seen[i] = true
	}
	return st.writeConfig(st.Hub(), st.hubConfig(slices.Sorted(maps.Keys(seen))))
}

func (st *Star) writeConfig(n *Node, c starConfig) error {
	text, err := st.renderStarConfig(n, c)
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	// Written beside and renamed: an endpoint reloading at this moment
	// reads the old file or the new one, never half of one.
	tmp := n.ConfigFile + ".new"
	if err := os.WriteFile(tmp, text, 0o600); err != nil {
		return fmt.Errorf("testbed: writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, n.ConfigFile); err != nil {
		return fmt.Errorf("testbed: replacing %s: %w", n.ConfigFile, err)
	}
	return nil
}

// renderStarConfig returns node n's configuration, checked to be valid TOML
// (the raw lines come from callers).
func (st *Star) renderStarConfig(n *Node, c starConfig) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# scpsvpn endpoint of %s, written by the testbed (hub and spoke)\n", n.Name)
	b.WriteString("[interface]\n")
	fmt.Fprintf(&b, "name = %s\n", quote(n.TUNName))
	fmt.Fprintf(&b, "listen = %s\n", quote(c.Listen.String()))
	fmt.Fprintf(&b, "mtu = %d\n", st.cfg.MTU)
	fmt.Fprintf(&b, "private_key_file = %s\n", quote(n.KeyFile))
	fmt.Fprintf(&b, "address = %s\n", quoteList([]netip.Prefix{netip.PrefixFrom(n.TUN4, 32), netip.PrefixFrom(n.TUN6, 128)}))
	fmt.Fprintf(&b, "log_level = %s\n", quote(st.cfg.LogLevel))
	writeRaw(&b, c.Interface)
	for _, p := range c.Peers {
		b.WriteString("\n[[peer]]\n")
		fmt.Fprintf(&b, "name = %s\n", quote(p.Name))
		fmt.Fprintf(&b, "public_key = %s\n", quote(p.PublicKey))
		if p.Endpoint.IsValid() {
			fmt.Fprintf(&b, "endpoint = %s\n", quote(p.Endpoint.String()))
		}
		fmt.Fprintf(&b, "subnets = %s\n", quoteList(p.Subnets))
		if strings.TrimSpace(st.cfg.PeerLink) != "" {
			b.WriteString("\n[peer.link]\n")
			writeRaw(&b, st.cfg.PeerLink)
		}
	}
	out := []byte(b.String())
	var check map[string]any
	if err := toml.Unmarshal(out, &check); err != nil {
		return nil, fmt.Errorf("the configuration of %s is not valid TOML (check the extra lines): %w\n%s", n.Name, err, numbered(out))
	}
	return out, nil
}
