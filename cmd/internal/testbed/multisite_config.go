package testbed

// This file owns the configurations of a Star's endpoints: the hub's (one
// [[peer]] per spoke it serves, each owning its spoke's LANs) and each
// spoke's (one [[peer]], the hub, owning the hub's LANs and every other
// spoke's), described as nodeConfigs and written through configs (config.go).
// The hub's can be rewritten with fewer spokes for a reload (SIGHUP) test.

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// nodeConfig is node n's configuration listening on listen with peers.
func (st *Star) nodeConfig(n *Node, listen netip.AddrPort, iface string, peers []nodePeer) nodeConfig {
	for i := range peers {
		peers[i].Link = st.cfg.PeerLink
	}
	return nodeConfig{
		Node:      n.Name,
		TUNName:   n.TUNName,
		Listen:    listen,
		KeyFile:   n.KeyFile,
		TUN4:      n.TUN4,
		TUN6:      n.TUN6,
		Interface: iface,
		Peers:     peers,
	}
}

// hubConfig is the hub's configuration serving the given spokes.
func (st *Star) hubConfig(spokes []int) nodeConfig {
	var peers []nodePeer
	for _, i := range spokes {
		s := st.Spoke(i)
		peers = append(peers, nodePeer{Name: s.Name, PublicKey: s.PublicKey, Endpoint: st.SpokeEndpoint(i),
			Subnets: st.peerSubnets(0, i, []netip.Prefix{s.LAN4, s.LAN6})})
	}
	return st.nodeConfig(st.Hub(), netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(st.Port)), st.cfg.HubInterface, peers)
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
func (st *Star) spokeConfig(i int) nodeConfig {
	hub := st.Hub()
	p := nodePeer{Name: hub.Name, PublicKey: hub.PublicKey, Endpoint: st.HubEndpoint(i),
		Subnets: []netip.Prefix{hub.LAN4, hub.LAN6}}
	for _, n := range st.Nodes[1:] {
		if n.Index != i {
			p.Subnets = append(p.Subnets, n.LAN4, n.LAN6)
		}
	}
	p.Subnets = st.peerSubnets(i, 0, p.Subnets)
	return st.nodeConfig(st.Spoke(i), netip.AddrPortFrom(st.Link(i).SpokeAddr.Addr(), uint16(st.Port)), st.cfg.SpokeInterface, []nodePeer{p})
}

// WriteHubConfig rewrites the hub's configuration file with only the given
// spokes (1-based) as peers; send the hub SIGHUP (Signal) to apply it. An
// empty list is refused: the endpoint needs at least one peer. The file is
// replaced whole (configs.File.WriteFile): an endpoint reloading at this
// moment reads the old one or the new one.
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
	return st.cfg.writeConfig(st.Hub().ConfigFile, st.hubConfig(slices.Sorted(maps.Keys(seen))))
}
