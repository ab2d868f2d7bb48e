// Package testbed builds the two-site topology of scpsvpn's end-to-end
// tests, demo and benchmark: two network namespaces joined by an underlay
// (a veth pair, or the link emulator run in-process), keys and endpoint
// configurations in a temporary directory, endpoint processes with their
// logs, and a teardown that always runs.
package testbed

// This file owns the Testbed itself: its configuration, the sites and their
// addresses, building the namespaces and the underlay, and Close. Names carry
// the creating PID and a random suffix, so parallel runs never collide and a
// later run can sweep what a killed one left behind.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"scpsvpn/cmd/internal/linkemu"
	"scpsvpn/cmd/internal/namespace"
	"scpsvpn/configs"
)

// Kind selects the underlay between the sites.
type Kind string

const (
	Veth     Kind = "veth"     // a veth pair: a perfect link
	Emulated Kind = "emulated" // the link emulator with Config.Link's model
)

// Side names a site.
type Side int

const (
	A Side = iota
	B
	// A2 and B2 are the second pair of sites (Config.SecondPair): their
	// own endpoints, subnets and association, in A's and B's namespaces,
	// so both associations cross the same underlay (two sites behind one
	// satellite beam).
	A2
	B2
)

func (s Side) String() string {
	switch s {
	case A:
		return "site A"
	case B:
		return "site B"
	case A2:
		return "site A2"
	}
	return "site B2"
}

// Config describes a testbed; zero fields take the defaults noted.
type Config struct {
	Kind Kind            // default Veth
	Link linkemu.Options // Emulated: Fwd (A->B), Ret, Outages, Seed, MTU; namespaces, devices and addresses are set here

	UnderlayA, UnderlayB netip.Prefix // default 10.200.0.1/24 and 10.200.0.2/24

	Endpoints // the port, binary, [interface] mtu and log_level, files and timeouts

	// The raw TOML lines below are decoded into their table
	// (configs.Interface, configs.Link) when the files are written: an
	// unknown key is an error then, and a key the testbed sets is replaced.
	InterfaceA       string // extra raw TOML lines for A's [interface]
	InterfaceB       string // extra raw TOML lines for B's [interface]
	PeerLinkA        string // raw TOML lines of A's [peer.link] (A's view of the link to B); empty = none
	PeerLinkB        string // raw TOML lines of B's [peer.link]
	PeerKeys         string // extra raw TOML lines of both sites' [[peer]] table, e.g. quic = "repair"
	BWithoutEndpoint bool   // B's peer entry for A has no endpoint: B learns it when A connects
	// SecondPair adds sites A2 (10.3.0.0/24) and B2 (10.4.0.0/24) with
	// their own endpoints in A's and B's namespaces, associated with each
	// other on Port+1 over the same underlay, told PeerLinkA and PeerLinkB
	// as A and B are.
	SecondPair bool
	TUNName    string // both sites' TUN device name; default one unique per run and site
	// TwoPaths adds a second veth link between A and B (10.201.0.1/24 and
	// .2/24, paths.go): A's peer entry for B then names both links as
	// paths (PathNames) and no endpoint; B's entry for A keeps A's first
	// address, and B learns A's paths from its packets.
	TwoPaths   bool
	BackupPath bool   // TwoPaths: the second path is a backup
	PathLink   string // TwoPaths: raw TOML lines of each path's [peer.path.link]
	// PathLinks, when set, are each path's own [peer.path.link] lines
	// (PathLink is then unused).
	PathLinks [2]string
	// Link2 is the second link's emulator model (TwoPaths with Kind
	// Emulated): one emulator per link, each with its own delay, rates,
	// loss and outages.
	Link2 linkemu.Options
}

// Site is one side of the testbed with everything a test needs to know.
type Site struct {
	Side        Side
	Name        string       // peer name: "site-a" / "site-b"
	NS          string       // network namespace (usable with `ip netns exec`)
	Underlay    netip.Prefix // address on the underlay link
	UnderlayDev string       // underlay device (veth or emulator TUN)
	LAN4, LAN6  netip.Prefix // the site's subnets: 10.1.0.0/24 + fd00:1::/64, 10.2.0.0/24 + fd00:2::/64
	TUN4, TUN6  netip.Addr   // the endpoint TUN's addresses: 10.1.0.1 + fd00:1::1, 10.2.0.1 + fd00:2::1
	TUNName     string       // the endpoint TUN device name (unique per run)
	PrivateKey  string       // base64 X25519
	PublicKey   string
	KeyFile     string // private key, mode 0600
	ConfigFile  string
	LogFile     string // the endpoint's stdout and stderr

	// Underlay2 and UnderlayDev2 are the second link's address and device
	// (Config.TwoPaths).
	Underlay2    netip.Prefix
	UnderlayDev2 string
}

// Endpoint returns the site's association address (underlay address, port).
func (s *Site) Endpoint(port int) netip.AddrPort {
	return netip.AddrPortFrom(s.Underlay.Addr(), uint16(port))
}

// Testbed is a built topology. Close it (defer) in every case.
type Testbed struct {
	ID     string // random part of every name
	Kind   Kind
	Dir    string
	Port   int
	A, B   *Site
	A2, B2 *Site // Config.SecondPair; nil without

	cfg    Config
	emu    *linkemu.Emulator
	emu2   *linkemu.Emulator // the second link's (TwoPaths, Emulated)
	ownDir bool
	topo   // the endpoints (slot A, B) and the teardown
}

// NamePrefix starts every namespace a testbed creates: stb-<pid>-<id>-a|b.
const NamePrefix = "stb-"

// dirPrefix starts the temporary directories: scps-testbed-<pid>-<id>-*.
const dirPrefix = "scps-testbed-"

// New builds the namespaces, the underlay, keys and configurations. On
// error everything built so far is removed.
func New(cfg Config) (tb *Testbed, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "testbed")
	id := newID(log)
	tb = &Testbed{ID: id, Kind: cfg.Kind, Port: cfg.Port, cfg: cfg}
	slots := 2
	if cfg.SecondPair {
		slots = 4
	}
	tb.topo = newTopo(log.With("testbed", id), slots, cfg.StartTimeout, cfg.StopTimeout, tb.procSite)
	tb.A = tb.newSite(A, cfg.UnderlayA, "10.1.0", "fd00:1::")
	tb.B = tb.newSite(B, cfg.UnderlayB, "10.2.0", "fd00:2::")
	if cfg.SecondPair {
		tb.A2 = tb.newSite(A2, cfg.UnderlayA, "10.3.0", "fd00:3::")
		tb.B2 = tb.newSite(B2, cfg.UnderlayB, "10.4.0", "fd00:4::")
	}
	defer func() {
		if err != nil {
			tb.Close()
			tb = nil
		}
	}()
	if tb.Dir, tb.ownDir, err = makeDir(cfg.Dir, tb.ID); err != nil {
		return tb, err
	}
	for _, s := range []*Site{tb.A, tb.B} {
		if err := namespace.Create(s.NS); err != nil {
			return tb, err
		}
		if err := loUp(s.NS); err != nil {
			return tb, err
		}
	}
	if err := tb.buildUnderlay(); err != nil {
		return tb, err
	}
	if cfg.TwoPaths {
		if err := tb.buildSecondLink(); err != nil {
			return tb, err
		}
	}
	if err := tb.writeFiles(); err != nil {
		return tb, err
	}
	tb.log.Info("testbed up", "kind", cfg.Kind, "ns_a", tb.A.NS, "ns_b", tb.B.NS, "dir", tb.Dir)
	return tb, nil
}

func (c *Config) defaults() error {
	if c.Kind == "" {
		c.Kind = Veth
	}
	if c.Kind != Veth && c.Kind != Emulated {
		return fmt.Errorf("testbed: unknown kind %q (want %q or %q)", c.Kind, Veth, Emulated)
	}
	if !c.UnderlayA.IsValid() {
		c.UnderlayA = netip.MustParsePrefix("10.200.0.1/24")
	}
	if !c.UnderlayB.IsValid() {
		c.UnderlayB = netip.MustParsePrefix("10.200.0.2/24")
	}
	if c.UnderlayA.Addr() == c.UnderlayB.Addr() || c.UnderlayA.Masked() != c.UnderlayB.Masked() {
		return fmt.Errorf("testbed: underlay addresses %s and %s must differ within one subnet", c.UnderlayA, c.UnderlayB)
	}
	c.Endpoints.defaults()
	return nil
}

// newID sweeps what dead testbeds left behind and returns a new random ID.
func newID(log *slog.Logger) string {
	if swept, err := SweepStale(); err != nil {
		log.Warn("sweeping stale testbeds", "err", err)
	} else if len(swept) > 0 {
		log.Info("removed namespaces of dead testbeds", "namespaces", swept)
	}
	var rnd [3]byte
	rand.Read(rnd[:])
	return hex.EncodeToString(rnd[:])
}

func (tb *Testbed) newSite(side Side, underlay netip.Prefix, lan4, lan6 string) *Site {
	// l names the site; ns its namespace's letter (the second pair lives
	// in the first pair's namespaces).
	names := map[Side][2]string{A: {"a", "a"}, B: {"b", "b"}, A2: {"c", "a"}, B2: {"d", "b"}}[side]
	l, ns := names[0], names[1]
	tunName := "scps" + tb.ID + l // 11 bytes
	if tb.cfg.TUNName != "" && side <= B {
		tunName = tb.cfg.TUNName
	}
	return &Site{
		Side:        side,
		Name:        "site-" + l,
		NS:          fmt.Sprintf("%s%d-%s-%s", NamePrefix, os.Getpid(), tb.ID, ns),
		Underlay:    underlay,
		UnderlayDev: map[Kind]string{Veth: "stb", Emulated: "emu"}[tb.Kind] + tb.ID + ns, // 10 bytes
		LAN4:        netip.MustParsePrefix(lan4 + ".0/24"),
		LAN6:        netip.MustParsePrefix(lan6 + "/64"),
		TUN4:        netip.MustParseAddr(lan4 + ".1"),
		TUN6:        netip.MustParseAddr(lan6 + "1"),
		TUNName:     tunName,
	}
}

// Site returns the site of side (nil for the second pair without
// Config.SecondPair).
func (tb *Testbed) Site(side Side) *Site {
	switch side {
	case A:
		return tb.A
	case B:
		return tb.B
	case A2:
		return tb.A2
	}
	return tb.B2
}

// Emulator returns the link emulator (Kind Emulated), for its counters and
// clock; nil for a veth underlay.
func (tb *Testbed) Emulator() *linkemu.Emulator { return tb.emu }

// Emulator2 returns the second link's emulator (TwoPaths with Kind
// Emulated); nil otherwise.
func (tb *Testbed) Emulator2() *linkemu.Emulator { return tb.emu2 }

// makeDir returns dir, created if need be, or else a new temporary
// directory named after the topology's id (own true).
func makeDir(dir, id string) (string, bool, error) {
	if dir != "" {
		return dir, false, os.MkdirAll(dir, 0o700)
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-%s-", dirPrefix, os.Getpid(), id))
	if err != nil {
		return "", false, fmt.Errorf("testbed: temporary directory: %w", err)
	}
	return dir, true, nil
}

func loUp(ns string) error {
	h, err := namespace.Netlink(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("bringing lo up in %s: %w", ns, err)
	}
	return nil
}

func (tb *Testbed) buildUnderlay() error {
	if tb.Kind == Emulated {
		emu, err := tb.startEmulator(tb.cfg.Link, tb.A.UnderlayDev, tb.B.UnderlayDev, tb.A.Underlay, tb.B.Underlay)
		if err != nil {
			return fmt.Errorf("testbed: emulated underlay: %w", err)
		}
		tb.emu = emu
		return nil
	}
	return tb.vethPair(tb.A.UnderlayDev, tb.B.UnderlayDev, tb.A.Underlay, tb.B.Underlay)
}

// startEmulator runs the link emulator with model o between devA (address
// a) in A and devB (address b) in B.
func (tb *Testbed) startEmulator(o linkemu.Options, devA, devB string, a, b netip.Prefix) (*linkemu.Emulator, error) {
	o.NSA, o.NSB = tb.A.NS, tb.B.NS
	o.DevA, o.DevB = devA, devB
	o.AddrA, o.AddrB = []netip.Prefix{a}, []netip.Prefix{b}
	if o.Logger == nil {
		o.Logger = tb.cfg.Logger.With("testbed", tb.ID, "link", devA)
	}
	emu, err := linkemu.New(o)
	if err != nil {
		return nil, err
	}
	emu.Start()
	return emu, nil
}

// vethPair joins A and B with a veth pair, devA (address a) in A and devB
// (address b) in B.
func (tb *Testbed) vethPair(devA, devB string, a, b netip.Prefix) error {
	hA, err := namespace.Netlink(tb.A.NS)
	if err != nil {
		return err
	}
	defer hA.Close()
	nsB, err := netns.GetFromName(tb.B.NS)
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", tb.B.NS, err)
	}
	defer nsB.Close()
	// Created from inside A with the peer placed straight into B: the
	// pair never exists in the host namespace, so its names cannot clash.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: devA}, PeerName: devB, PeerNamespace: netlink.NsFd(int(nsB))}
	if err := hA.LinkAdd(veth); err != nil {
		return fmt.Errorf("testbed: creating veth %s/%s: %w", devA, devB, err)
	}
	if err := addrUp(tb.A.NS, devA, a); err != nil {
		return err
	}
	return addrUp(tb.B.NS, devB, b)
}

func addrUp(ns, dev string, p netip.Prefix) error {
	h, err := namespace.Netlink(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("finding %s in %s: %w", dev, ns, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if err := h.AddrAdd(link, a); err != nil {
		return fmt.Errorf("adding %s to %s in %s: %w", p, dev, ns, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up in %s: %w", dev, ns, err)
	}
	return nil
}

// sitePair is one site's side of an association: whom it peers with, on
// which port, and what it is told.
type sitePair struct {
	Self, Peer   *Site
	Port         int
	WithEndpoint bool           // the peer entry carries the peer's UDP endpoint
	Interface    string         // extra raw TOML lines for [interface]
	PeerLink     string         // raw TOML lines for [peer.link]
	PeerKeys     string         // extra raw TOML lines for [[peer]]
	Paths        []configs.Path // the peer entry's [[peer.path]] tables (then no endpoint)
}

// siteConfig is what p.Self's configuration says.
func siteConfig(p sitePair) nodeConfig {
	peer := nodePeer{Name: p.Peer.Name, PublicKey: p.Peer.PublicKey, Subnets: []netip.Prefix{p.Peer.LAN4, p.Peer.LAN6}, Link: p.PeerLink, Keys: p.PeerKeys, Paths: p.Paths}
	if p.WithEndpoint && len(p.Paths) == 0 {
		peer.Endpoint = p.Peer.Endpoint(p.Port)
	}
	return nodeConfig{
		Node:      p.Self.Name,
		TUNName:   p.Self.TUNName,
		Listen:    p.Self.Endpoint(p.Port),
		KeyFile:   p.Self.KeyFile,
		TUN4:      p.Self.TUN4,
		TUN6:      p.Self.TUN6,
		Interface: p.Interface,
		Peers:     []nodePeer{peer},
	}
}

func (tb *Testbed) writeFiles() error {
	sites := []*Site{tb.A, tb.B}
	pairs := []sitePair{
		{Self: tb.A, Peer: tb.B, WithEndpoint: true, Interface: tb.cfg.InterfaceA, PeerLink: tb.cfg.PeerLinkA, PeerKeys: tb.cfg.PeerKeys, Port: tb.cfg.Port},
		{Self: tb.B, Peer: tb.A, WithEndpoint: !tb.cfg.BWithoutEndpoint, Interface: tb.cfg.InterfaceB, PeerLink: tb.cfg.PeerLinkB, PeerKeys: tb.cfg.PeerKeys, Port: tb.cfg.Port},
	}
	if tb.cfg.TwoPaths {
		paths, err := tb.paths()
		if err != nil {
			return err
		}
		pairs[0].Paths = paths
		// B answers on both links.
		pairs[1].Interface = fmt.Sprintf("listen = %q\n%s", netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(tb.cfg.Port)), pairs[1].Interface)
	}
	if tb.cfg.SecondPair {
		sites = append(sites, tb.A2, tb.B2)
		pairs = append(pairs,
			sitePair{Self: tb.A2, Peer: tb.B2, WithEndpoint: true, Interface: tb.cfg.InterfaceA, PeerLink: tb.cfg.PeerLinkA, PeerKeys: tb.cfg.PeerKeys, Port: tb.cfg.Port + 1},
			sitePair{Self: tb.B2, Peer: tb.A2, WithEndpoint: true, Interface: tb.cfg.InterfaceB, PeerLink: tb.cfg.PeerLinkB, PeerKeys: tb.cfg.PeerKeys, Port: tb.cfg.Port + 1})
	}
	for _, s := range sites {
		var err error
		if s.PrivateKey, s.PublicKey, err = keyPair(); err != nil {
			return err
		}
		l := s.Name[len(s.Name)-1:]
		s.KeyFile = filepath.Join(tb.Dir, l+".key")
		s.ConfigFile = filepath.Join(tb.Dir, l+".toml")
		s.LogFile = filepath.Join(tb.Dir, l+".log")
		if err := writeKey(s.KeyFile, s.PrivateKey); err != nil {
			return err
		}
	}
	for _, p := range pairs {
		if err := tb.cfg.writeConfig(p.Self.ConfigFile, siteConfig(p)); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the endpoints, kills anything left in the namespaces, stops
// the emulator, deletes the namespaces (and so every device in them) and
// the temporary directory. It runs once; later calls return its result.
func (tb *Testbed) Close() error {
	dir := ""
	if tb.ownDir && !tb.cfg.KeepDir {
		dir = tb.Dir
	}
	return tb.teardown("testbed", []string{tb.A.NS, tb.B.NS}, func() []error {
		var errs []error
		for _, e := range []*linkemu.Emulator{tb.emu, tb.emu2} {
			if e != nil {
				if _, err := e.Stop(); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return errs
	}, dir)
}

// SweepStale removes the namespaces and temporary directories of testbeds
// whose process is gone (killed before Close could run), with whatever still
// runs inside the namespaces. Those of live processes, including other
// concurrent runs, are kept. It returns what it removed.
func SweepStale() ([]string, error) {
	unlock, err := lockSweeps()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return sweepStale()
}

// sweepLockPath is a file whose lock serialises sweeps across processes:
// test binaries run side by side (test.sh runs two at once), and a test
// that plants a stale testbed must see its own sweep remove it.
var sweepLockPath = filepath.Join(os.TempDir(), "scps-testbed.sweep-lock")

// lockSweeps takes the sweep lock; the function it returns releases it.
func lockSweeps() (unlock func(), err error) {
	f, err := os.OpenFile(sweepLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sweep lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("sweep lock %s: %w", sweepLockPath, err)
	}
	return func() { f.Close() }, nil
}

// sweepStale is SweepStale with the sweep lock held.
func sweepStale() ([]string, error) {
	nss, dirs, err := ownedBy(func(pid int) bool { return !processAlive(pid) })
	errs := []error{err}
	var swept []string
	for _, ns := range nss {
		namespace.KillAll(ns)
		if err := namespace.Delete(ns); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, ns)
	}
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, dir)
	}
	return swept, errors.Join(errs...)
}

// LeftBy lists the namespaces and temporary directories that testbeds of
// process pid left: once that process has exited, anything listed leaked.
func LeftBy(pid int) []string {
	nss, dirs, _ := ownedBy(func(p int) bool { return p == pid })
	return append(nss, dirs...)
}

// ownedBy lists the testbed namespaces (names) and temporary directories
// (paths) whose creating process ID, part of their name, satisfies match.
func ownedBy(match func(pid int) bool) (nss, dirs []string, err error) {
	var errs []error
	owned := func(name, prefix string) bool {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return false
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		return err == nil && pid > 0 && match(pid)
	}
	entries, err := os.ReadDir(namespace.Dir)
	if err != nil && !os.IsNotExist(err) {
		errs = append(errs, fmt.Errorf("listing %s: %w", namespace.Dir, err))
	}
	for _, e := range entries {
		if owned(e.Name(), NamePrefix) {
			nss = append(nss, e.Name())
		}
	}
	tmp := os.TempDir()
	entries, err = os.ReadDir(tmp)
	if err != nil {
		errs = append(errs, fmt.Errorf("listing %s: %w", tmp, err))
	}
	for _, e := range entries {
		if e.IsDir() && owned(e.Name(), dirPrefix) {
			dirs = append(dirs, filepath.Join(tmp, e.Name()))
		}
	}
	return nss, dirs, errors.Join(errs...)
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
