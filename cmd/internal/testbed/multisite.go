package testbed

// This file owns the hub-and-spoke topology (Star): one hub namespace and N
// spoke namespaces, each spoke joined to the hub by its own veth pair with
// its own /24 underlay (hub 10.201.i.1, spoke 10.201.i.2), keys and
// configurations, and a teardown that always runs. The hub listens on every
// underlay address at once (0.0.0.0:port); the kernel answers each spoke
// from the address on that spoke's link. Spokes know only the hub: the hub's
// peer entry in a spoke's configuration owns the hub's LAN and every other
// spoke's LAN, so spoke-to-spoke traffic goes through the hub.
//
// Names follow the two-site testbed (NamePrefix, the creating PID, a random
// ID), so SweepStale removes what a killed run of either kind left behind.

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"scpsvpn/cmd/internal/namespace"
)

// MaxSpokes bounds StarConfig.Spokes: spoke i owns 10.i.0.0/24 and the
// underlay 10.201.i.0/24, and 10.0.0.0/24 is the hub's.
const MaxSpokes = 200

// StarConfig describes a hub-and-spoke topology; zero fields take the
// defaults noted.
type StarConfig struct {
	Spokes int // number of spokes, 1..MaxSpokes; default 3

	Endpoints // the port of every association, binary, [interface] mtu and log_level, files and timeouts

	// Raw TOML lines, decoded into their table as Config's are.
	HubInterface   string // extra raw TOML lines for the hub's [interface]
	SpokeInterface string // extra raw TOML lines for every spoke's [interface]
	PeerLink       string // raw TOML lines of every [peer.link]; empty = none
	// PeerSubnets, if set, rewrites the subnets node's [[peer]] entry of
	// node peer lists (the hub is 0), given the default ones: a test can
	// configure a peer wider than its own LANs.
	PeerSubnets func(node, peer int, subnets []netip.Prefix) []netip.Prefix
}

// Node is one site of a Star: the hub (Index 0) or spoke Index.
type Node struct {
	Index      int
	Name       string       // peer name: "hub", "spoke-1", ...
	NS         string       // network namespace (usable with `ip netns exec`)
	LAN4, LAN6 netip.Prefix // hub 10.0.0.0/24 + fd00::/64; spoke i 10.i.0.0/24 + fd00:i::/64 (i in hex)
	TUN4, TUN6 netip.Addr   // the endpoint TUN's addresses: the .1 / ::1 of the LANs
	TUNName    string       // the endpoint TUN device name (unique per run)
	PrivateKey string       // base64 X25519
	PublicKey  string
	KeyFile    string // private key, mode 0600
	ConfigFile string
	LogFile    string // the endpoint's stdout and stderr
}

// StarLink is the underlay between the hub and one spoke: a veth pair.
type StarLink struct {
	Spoke     int
	HubDev    string       // in the hub's namespace
	SpokeDev  string       // in the spoke's namespace
	HubAddr   netip.Prefix // 10.201.i.1/24
	SpokeAddr netip.Prefix // 10.201.i.2/24
}

// Star is a built hub-and-spoke topology. Close it (defer) in every case.
type Star struct {
	ID    string // random part of every name
	Dir   string
	Port  int
	Nodes []*Node    // Nodes[0] is the hub, Nodes[i] spoke i
	Links []StarLink // Links[i-1] joins spoke i

	cfg    StarConfig
	ownDir bool
	topo   // the endpoints (slot i: node i) and the teardown
}

// NewStar builds the namespaces, the links, keys and configurations. On
// error everything built so far is removed.
func NewStar(cfg StarConfig) (st *Star, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "testbed")
	id := newID(log)
	st = &Star{ID: id, Port: cfg.Port, cfg: cfg}
	st.topo = newTopo(log.With("star", id), cfg.Spokes+1, cfg.StartTimeout, cfg.StopTimeout, st.procSite)
	for i := 0; i <= cfg.Spokes; i++ {
		st.Nodes = append(st.Nodes, st.newNode(i))
		if i > 0 {
			st.Links = append(st.Links, st.newLink(i))
		}
	}
	defer func() {
		if err != nil {
			st.Close()
			st = nil
		}
	}()
	if st.Dir, st.ownDir, err = makeDir(cfg.Dir, st.ID); err != nil {
		return st, err
	}
	for _, n := range st.Nodes {
		if err := namespace.Create(n.NS); err != nil {
			return st, err
		}
		if err := loUp(n.NS); err != nil {
			return st, err
		}
	}
	for _, l := range st.Links {
		if err := st.buildLink(l); err != nil {
			return st, err
		}
	}
	if err := st.writeFiles(); err != nil {
		return st, err
	}
	st.log.Info("star up", "spokes", cfg.Spokes, "hub_ns", st.Nodes[0].NS, "dir", st.Dir)
	return st, nil
}

func (c *StarConfig) defaults() error {
	if c.Spokes == 0 {
		c.Spokes = 3
	}
	if c.Spokes < 1 || c.Spokes > MaxSpokes {
		return fmt.Errorf("testbed: %d spokes: use 1..%d", c.Spokes, MaxSpokes)
	}
	c.Endpoints.defaults()
	return nil
}

// newNode names node i and gives it its addresses. Interface names stay
// within 15 bytes: "scps" + 6 hex + "h" or up to 3 digits.
func (st *Star) newNode(i int) *Node {
	name, tag := "hub", "h"
	if i > 0 {
		name, tag = "spoke-"+strconv.Itoa(i), strconv.Itoa(i)
	}
	nsTag := "hub"
	if i > 0 {
		nsTag = "s" + strconv.Itoa(i)
	}
	lan4 := netip.AddrFrom4([4]byte{10, byte(i), 0, 0})
	lan6 := netip.MustParseAddr(fmt.Sprintf("fd00:%x::", i))
	return &Node{
		Index:   i,
		Name:    name,
		NS:      fmt.Sprintf("%s%d-%s-%s", NamePrefix, os.Getpid(), st.ID, nsTag),
		LAN4:    netip.PrefixFrom(lan4, 24),
		LAN6:    netip.PrefixFrom(lan6, 64),
		TUN4:    lan4.Next(),
		TUN6:    lan6.Next(),
		TUNName: "scps" + st.ID + tag,
	}
}

func (st *Star) newLink(i int) StarLink {
	return StarLink{
		Spoke:     i,
		HubDev:    fmt.Sprintf("stb%sh%d", st.ID, i),
		SpokeDev:  fmt.Sprintf("stb%ss%d", st.ID, i),
		HubAddr:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 201, byte(i), 1}), 24),
		SpokeAddr: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 201, byte(i), 2}), 24),
	}
}

// Hub returns the hub.
func (st *Star) Hub() *Node { return st.Nodes[0] }

// Spoke returns spoke i (1-based).
func (st *Star) Spoke(i int) *Node { return st.Nodes[i] }

// Link returns the link of spoke i (1-based).
func (st *Star) Link(i int) StarLink { return st.Links[i-1] }

// SpokeEndpoint is spoke i's association address as the hub sees it.
func (st *Star) SpokeEndpoint(i int) netip.AddrPort {
	return netip.AddrPortFrom(st.Link(i).SpokeAddr.Addr(), uint16(st.Port))
}

// HubEndpoint is the hub's association address as spoke i sees it.
func (st *Star) HubEndpoint(i int) netip.AddrPort {
	return netip.AddrPortFrom(st.Link(i).HubAddr.Addr(), uint16(st.Port))
}

// buildLink creates spoke l.Spoke's veth pair from inside the hub's
// namespace with the peer placed straight into the spoke's, so the pair
// never exists in the host namespace, and addresses both ends.
func (st *Star) buildLink(l StarLink) error {
	hub, spoke := st.Hub(), st.Spoke(l.Spoke)
	h, err := namespace.Netlink(hub.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	nsS, err := netns.GetFromName(spoke.NS)
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", spoke.NS, err)
	}
	defer nsS.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.HubDev}, PeerName: l.SpokeDev, PeerNamespace: netlink.NsFd(int(nsS))}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("testbed: creating veth %s/%s: %w", l.HubDev, l.SpokeDev, err)
	}
	if err := addrUp(hub.NS, l.HubDev, l.HubAddr); err != nil {
		return err
	}
	return addrUp(spoke.NS, l.SpokeDev, l.SpokeAddr)
}

func (st *Star) writeFiles() error {
	for _, n := range st.Nodes {
		var err error
		if n.PrivateKey, n.PublicKey, err = keyPair(); err != nil {
			return err
		}
		base := "hub"
		if n.Index > 0 {
			base = "spoke" + strconv.Itoa(n.Index)
		}
		n.KeyFile = filepath.Join(st.Dir, base+".key")
		n.ConfigFile = filepath.Join(st.Dir, base+".toml")
		n.LogFile = filepath.Join(st.Dir, base+".log")
		if err := writeKey(n.KeyFile, n.PrivateKey); err != nil {
			return err
		}
	}
	all := make([]int, 0, len(st.Links))
	for _, l := range st.Links {
		all = append(all, l.Spoke)
	}
	if err := st.WriteHubConfig(all); err != nil {
		return err
	}
	for i := 1; i < len(st.Nodes); i++ {
		if err := st.cfg.writeConfig(st.Nodes[i].ConfigFile, st.spokeConfig(i)); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the endpoints, kills anything left in the namespaces, deletes
// the namespaces (and so every device in them; the endpoints' control
// sockets are abstract, so they go with their processes) and the temporary
// directory.
// It runs once; later calls return its result.
func (st *Star) Close() error {
	dir := ""
	if st.ownDir && !st.cfg.KeepDir {
		dir = st.Dir
	}
	nss := make([]string, len(st.Nodes))
	for i, n := range st.Nodes {
		nss[i] = n.NS
	}
	return st.teardown("star", nss, func() []error { return nil }, dir)
}
