// Package configs owns the endpoint's configuration file: the TOML schema,
// strict decoding, defaults, and validation that names the offending key and
// says what is allowed. It is plain data: of the rest of scpsvpn it imports
// only scps/settings, the leaf that holds the transport's defaults, bounds
// and controller names, so the file accepts exactly what the association
// does; other packages take the typed values it produces.
package configs

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"scpsvpn/scps/settings"
)

// File is the configuration file as written by the user.
type File struct {
	Interface Interface `toml:"interface"`
	Peers     []Peer    `toml:"peer"`
}

// Interface is the [interface] table: this endpoint's TUN device and UDP socket.
type Interface struct {
	Name           string   `toml:"name"`
	Listen         string   `toml:"listen"`
	MTU            int      `toml:"mtu,omitempty"`
	PrivateKeyFile string   `toml:"private_key_file"`
	Address        []string `toml:"address,omitempty"`
	LogLevel       string   `toml:"log_level,omitempty"`
	MaxFlows       int      `toml:"max_flows,omitempty"`
	Memory         string   `toml:"memory,omitempty"`
	Metrics        string   `toml:"metrics,omitempty"`
	StateDir       string   `toml:"state_dir,omitempty"`
}

// Peer is one [[peer]] table: a remote site.
type Peer struct {
	Name      string   `toml:"name"`
	PublicKey string   `toml:"public_key"`
	Endpoint  string   `toml:"endpoint,omitempty"`
	Subnets   []string `toml:"subnets"`
	Quic      string   `toml:"quic,omitempty"`
	QuicPorts []int    `toml:"quic_ports,omitempty"`
	Link      Link     `toml:"link,omitempty"`
	Paths     []Path   `toml:"path,omitempty"`
}

// Path is one [[peer.path]] table: one of several links to the peer
// (docs/multipath.md). The association runs over all of them at once.
type Path struct {
	Name     string `toml:"name"`
	Local    string `toml:"local,omitempty"`
	Endpoint string `toml:"endpoint"`
	Backup   bool   `toml:"backup,omitempty"`
	Link     Link   `toml:"link,omitempty"`
}

// Link is the [peer.link] table: what we know of the path to that peer.
type Link struct {
	Up            string `toml:"up,omitempty"`
	Down          string `toml:"down,omitempty"`
	RTT           string `toml:"rtt,omitempty"`
	Congestion    string `toml:"congestion,omitempty"`
	Loss          string `toml:"loss,omitempty"`
	OutageAfter   string `toml:"outage_after,omitempty"`
	ProbeInterval string `toml:"probe_interval,omitempty"`
	MaxOutage     string `toml:"max_outage,omitempty"`
	Window        string `toml:"window,omitempty"`
	MTU           int    `toml:"mtu,omitempty"`
}

// Defaults applied where the file is silent.
const (
	DefaultMTU      = 1400
	DefaultListen   = "0.0.0.0:4700"
	DefaultLogLevel = "info"
	DefaultMaxFlows = 16384
	DefaultRTT      = 600 * time.Millisecond
	// DefaultStateDir keeps what the endpoint learned of its peers' paths
	// across restarts (the unit's StateDirectory=).
	DefaultStateDir = "/var/lib/scpsvpn"
	// DefaultPathMTU is the underlay path's MTU unless [peer.link] mtu
	// says otherwise: Ethernet's, which most modems carry.
	DefaultPathMTU = 1500
)

// Bounds of [peer.link] mtu. The transport's bounds on the other link keys
// (the slowest rate, the window, the outage timers) are in scps/settings:
// checked here so a bad value is refused naming its key rather than when
// the association starts (tunnel's TestLinkKeysMatchTheTransport).
const (
	// A path MTU below IPv6's minimum (1280) would leave association
	// packets below the transport's least (1200 bytes).
	MinPathMTU = 1280
	MaxPathMTU = 9000
)

// QuicModes lists what a peer's quic key may say for UDP toward its
// subnets on quic_ports, the default first (docs/quic.md says why):
// "fallback" answers with ICMP port unreachable so that clients use TCP,
// which the endpoint accelerates; "repair" carries each such flow's
// datagrams reliably and in order, hiding the hop's losses; "pass" sends
// them as plain datagrams.
var QuicModes = []string{"fallback", "repair", "pass"}

// DefaultQuicPorts are the UDP ports QUIC uses by default: HTTP/3's.
var DefaultQuicPorts = []uint16{443}

// CongestionModes lists the controllers a peer may name, the default
// first (settings.Congestions, which scps/cc's registry matches).
var CongestionModes = settings.Congestions()

// LossModes lists the loss-cause modes a peer may name, the default first.
var LossModes = settings.LossModes()

// Config is the validated, typed configuration.
type Config struct {
	Name           string
	Listen         netip.AddrPort
	MTU            int
	PrivateKeyFile string
	Addresses      []netip.Prefix
	LogLevel       string
	MaxFlows       int
	Memory         int64          // bytes: the endpoint's memory budget (DefaultMemory when not set)
	Metrics        netip.AddrPort // Prometheus endpoint; invalid = off
	StateDir       string         // directory for path state kept across restarts (absolute)
	Peers          []PeerConfig
}

// PeerConfig is one validated peer.
type PeerConfig struct {
	Name      string
	PublicKey [32]byte
	Endpoint  netip.AddrPort // invalid when the peer only dials us
	Subnets   []netip.Prefix
	// Quic is the policy for UDP toward the peer's subnets on QuicPorts
	// (one of QuicModes).
	Quic      string
	QuicPorts []uint16
	Link      LinkConfig
	// Paths are the links to the peer in the order given; empty for a
	// peer reached over one path (Endpoint). With paths, Endpoint is the
	// first primary path's, where handshakes start.
	Paths []PathConfig
}

// MaxPaths bounds a peer's [[peer.path]] tables, and the paths an
// association learns from its peer: each costs a socket and probes.
const MaxPaths = 8

// PathConfig is one validated [[peer.path]] table.
type PathConfig struct {
	Name string
	// Local is the source address to send from; LocalDevice the
	// interface to send through instead (SO_BINDTODEVICE). Both empty:
	// the routing table picks.
	Local       netip.Addr
	LocalDevice string
	Endpoint    netip.AddrPort
	// Backup paths carry data only while no primary path works.
	Backup bool
	Link   LinkConfig
	// RTTUntold: its link table gives no rtt, so Link.RTT is DefaultRTT,
	// a guess: the transport judges its first silence with patience
	// until it has measured the path (docs/multipath.md, "Down and up").
	RTTUntold bool
}

// LinkConfig is a validated [peer.link] table. Zero rates mean unknown.
type LinkConfig struct {
	Up            int64 // bit/s toward the peer
	Down          int64 // bit/s from the peer
	RTT           time.Duration
	Congestion    string
	Loss          string
	OutageAfter   time.Duration // 0: the transport's default
	ProbeInterval time.Duration
	MaxOutage     time.Duration
	Window        int64 // bytes; 0: auto
	// MTU is the largest IP packet the underlay path to the peer carries
	// whole; the association's packets fill it.
	MTU int
}

// Load reads, decodes and validates a configuration file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes strictly (unknown keys are errors) and validates.
func Parse(data []byte) (*Config, error) {
	var f File
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, decodeError(err)
	}
	return f.Validate()
}

func decodeError(err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		e := strict.Errors[0]
		row, _ := e.Position()
		return fmt.Errorf("line %d: unknown key %q: remove it or check its spelling (see the config reference in README.md)", row, strings.Join(e.Key(), "."))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		key := strings.Join(de.Key(), ".")
		if key != "" {
			return fmt.Errorf("line %d: key %q: %s", row, key, de.Error())
		}
		return fmt.Errorf("line %d: %s", row, de.Error())
	}
	return err
}

// Validate checks every key and returns the typed configuration. The first
// problem found is returned, naming its key and what is allowed.
func (f *File) Validate() (*Config, error) {
	in := f.Interface
	c := &Config{
		Name:           in.Name,
		MTU:            in.MTU,
		PrivateKeyFile: in.PrivateKeyFile,
		LogLevel:       in.LogLevel,
		MaxFlows:       in.MaxFlows,
	}
	if c.Name == "" {
		return nil, errors.New(`interface.name: missing: give the TUN device a name, e.g. name = "scps0"`)
	}
	if len(c.Name) > 15 || strings.ContainsAny(c.Name, "/ \t") {
		return nil, fmt.Errorf("interface.name: %q is not a valid interface name: use at most 15 characters, no spaces or slashes", c.Name)
	}
	listen := in.Listen
	if listen == "" {
		listen = DefaultListen
	}
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return nil, fmt.Errorf("interface.listen: %q is not an address:port: use e.g. \"0.0.0.0:4700\" or \"[::]:4700\"", listen)
	}
	c.Listen = ap
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < 1280 || c.MTU > 9000 {
		return nil, fmt.Errorf("interface.mtu: %d is out of range: use 1280..9000 (1400 fits a 1500-byte path)", c.MTU)
	}
	if c.PrivateKeyFile == "" {
		return nil, errors.New("interface.private_key_file: missing: create one with `scpsvpn genkey > private.key; chmod 600 private.key` and name it here")
	}
	for i, a := range in.Address {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, fmt.Errorf("interface.address[%d]: %q is not an address with prefix: use e.g. \"10.1.0.1/32\"", i, a)
		}
		c.Addresses = append(c.Addresses, p)
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("interface.log_level: %q is not a level: use debug, info, warn or error", c.LogLevel)
	}
	if c.MaxFlows == 0 {
		c.MaxFlows = DefaultMaxFlows
	}
	if c.MaxFlows < 1 || c.MaxFlows > settings.MaxStreams {
		return nil, fmt.Errorf("interface.max_flows: %d is out of range: use 1..%d", c.MaxFlows, settings.MaxStreams)
	}
	if c.Memory, err = memoryKey(in.Memory, len(f.Peers)); err != nil {
		return nil, err
	}
	if in.Metrics != "" {
		ap, err := netip.ParseAddrPort(in.Metrics)
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("interface.metrics: %q is not an address:port: use e.g. \"127.0.0.1:9477\" (leave it out to serve no metrics)", in.Metrics)
		}
		c.Metrics = ap
	}
	c.StateDir = in.StateDir
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if !filepath.IsAbs(c.StateDir) {
		return nil, fmt.Errorf("interface.state_dir: %q is not an absolute path: use e.g. %q", in.StateDir, DefaultStateDir)
	}
	c.StateDir = filepath.Clean(c.StateDir)
	if len(f.Peers) == 0 {
		return nil, errors.New("peer: no [[peer]] table: add at least one peer with name, public_key and subnets")
	}
	names := map[string]bool{}
	keys := map[[32]byte]string{}
	subnets := map[netip.Prefix]string{}
	for i, p := range f.Peers {
		pc, err := p.validate(fmt.Sprintf("peer[%d]", i))
		if err != nil {
			return nil, err
		}
		if names[pc.Name] {
			return nil, fmt.Errorf("peer[%d].name: %q is used twice: give each peer its own name", i, pc.Name)
		}
		names[pc.Name] = true
		if other, ok := keys[pc.PublicKey]; ok {
			return nil, fmt.Errorf("peer[%d].public_key: the same key as peer %q: each peer has its own key", i, other)
		}
		keys[pc.PublicKey] = pc.Name
		for _, s := range pc.Subnets {
			if other, ok := subnets[s]; ok {
				return nil, fmt.Errorf("peer[%d].subnets: %s is already owned by peer %q: a subnet belongs to one peer", i, s, other)
			}
			subnets[s] = pc.Name
		}
		c.Peers = append(c.Peers, pc)
	}
	// The endpoint drops packets from its TUN whose source lies in a peer's
	// subnet (a LAN host spoofing another site), so its own address there
	// would silence it.
	for i, a := range c.Addresses {
		for _, pc := range c.Peers {
			for _, s := range pc.Subnets {
				if s.Contains(a.Addr()) {
					return nil, fmt.Errorf("interface.address[%d]: %v lies in peer %q's subnet %v: a peer's subnets must not cover this site; list the other sites' subnets one by one", i, a.Addr(), pc.Name, s)
				}
			}
		}
	}
	return c, nil
}

func (p *Peer) validate(where string) (PeerConfig, error) {
	pc := PeerConfig{Name: p.Name}
	if p.Name == "" {
		return pc, fmt.Errorf("%s.name: missing: name the peer, e.g. name = \"site-b\"", where)
	}
	where = fmt.Sprintf("%s (%s)", where, p.Name)
	if p.PublicKey == "" {
		return pc, fmt.Errorf("%s.public_key: missing: put the peer's `scpsvpn pubkey` output here", where)
	}
	raw, err := base64.StdEncoding.DecodeString(p.PublicKey)
	if err != nil || len(raw) != 32 {
		return pc, fmt.Errorf("%s.public_key: %q is not a key: use the 44-character base64 string printed by `scpsvpn pubkey`", where, p.PublicKey)
	}
	copy(pc.PublicKey[:], raw)
	if p.Endpoint != "" {
		ep, err := netip.ParseAddrPort(p.Endpoint)
		if err != nil {
			return pc, fmt.Errorf("%s.endpoint: %q is not an address:port: use e.g. \"192.0.2.2:4700\", or leave it out on a side that only answers", where, p.Endpoint)
		}
		pc.Endpoint = ep
	}
	if len(p.Subnets) == 0 {
		return pc, fmt.Errorf("%s.subnets: missing: list the subnets behind this peer, e.g. [\"10.2.0.0/24\"]", where)
	}
	for i, s := range p.Subnets {
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return pc, fmt.Errorf("%s.subnets[%d]: %q is not a subnet: use e.g. \"10.2.0.0/24\" or \"fd00:2::/64\"", where, i, s)
		}
		if pf.Masked() != pf {
			return pc, fmt.Errorf("%s.subnets[%d]: %q has host bits set: use %s", where, i, s, pf.Masked())
		}
		pc.Subnets = append(pc.Subnets, pf)
	}
	pc.Quic = p.Quic
	if pc.Quic == "" {
		pc.Quic = QuicModes[0]
	}
	if !contains(QuicModes, pc.Quic) {
		return pc, fmt.Errorf("%s.quic: %q is not a QUIC policy: use one of %s (see docs/quic.md)", where, p.Quic, strings.Join(QuicModes, ", "))
	}
	pc.QuicPorts = DefaultQuicPorts
	if p.QuicPorts != nil {
		if len(p.QuicPorts) == 0 {
			return pc, fmt.Errorf("%s.quic_ports: empty: list at least one UDP port (the default is [443]), or set quic = \"pass\" to carry QUIC as any other UDP", where)
		}
		pc.QuicPorts = nil
		for i, port := range p.QuicPorts {
			if port < 1 || port > 65535 {
				return pc, fmt.Errorf("%s.quic_ports[%d]: %d is not a UDP port: use 1..65535, e.g. quic_ports = [443]", where, i, port)
			}
			if slices.Contains(pc.QuicPorts, uint16(port)) {
				return pc, fmt.Errorf("%s.quic_ports[%d]: %d is listed twice: list each port once", where, i, port)
			}
			pc.QuicPorts = append(pc.QuicPorts, uint16(port))
		}
	}
	l, err := p.Link.validate(where + ".link")
	if err != nil {
		return pc, err
	}
	pc.Link = l
	if err := p.validatePaths(where, &pc); err != nil {
		return pc, err
	}
	return pc, nil
}

// validatePaths checks the peer's [[peer.path]] tables. A peer with paths
// names its endpoints there only: a peer-level endpoint beside them would
// be a path without a name or a local address.
func (p *Peer) validatePaths(where string, pc *PeerConfig) error {
	if len(p.Paths) == 0 {
		return nil
	}
	if p.Endpoint != "" {
		return fmt.Errorf("%s.endpoint: set beside [[peer.path]] tables: with paths, each path names its endpoint; remove the peer's endpoint", where)
	}
	if len(p.Paths) > MaxPaths {
		return fmt.Errorf("%s.path: %d paths: use at most %d", where, len(p.Paths), MaxPaths)
	}
	primary := false
	for i, path := range p.Paths {
		at := fmt.Sprintf("%s.path[%d]", where, i)
		pp, err := path.validate(at)
		if err != nil {
			return err
		}
		for _, q := range pc.Paths {
			if q.Name == pp.Name {
				return fmt.Errorf("%s.name: %q is used twice: give each path of a peer its own name", at, pp.Name)
			}
			if q.Endpoint == pp.Endpoint && q.Local == pp.Local && q.LocalDevice == pp.LocalDevice {
				return fmt.Errorf("%s (%s).endpoint: path %q already goes from the same local to %v: two paths need a different local or endpoint", at, pp.Name, q.Name, pp.Endpoint)
			}
		}
		primary = primary || !pp.Backup
		pc.Paths = append(pc.Paths, pp)
	}
	if !primary {
		return fmt.Errorf("%s.path: every path is a backup: set backup = false (or leave it out) on at least one path", where)
	}
	for _, pp := range pc.Paths {
		if !pp.Backup {
			pc.Endpoint = pp.Endpoint
			break
		}
	}
	return nil
}

func (p *Path) validate(where string) (PathConfig, error) {
	pp := PathConfig{Name: p.Name, Backup: p.Backup}
	if !ValidPathName(p.Name) {
		return pp, fmt.Errorf("%s.name: %q is not a path name: use 1..32 letters, digits, '-' or '_', e.g. name = \"geo\"", where, p.Name)
	}
	where = fmt.Sprintf("%s (%s)", where, p.Name)
	if p.Endpoint == "" {
		return pp, fmt.Errorf("%s.endpoint: missing: give the peer's address:port on this link, e.g. \"192.0.2.2:4700\"", where)
	}
	ep, err := netip.ParseAddrPort(p.Endpoint)
	if err != nil || ep.Port() == 0 {
		return pp, fmt.Errorf("%s.endpoint: %q is not an address:port: use e.g. \"192.0.2.2:4700\"", where, p.Endpoint)
	}
	pp.Endpoint = ep
	if p.Local != "" {
		if a, err := netip.ParseAddr(p.Local); err == nil {
			if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
				return pp, fmt.Errorf("%s.local: %q cannot be a source address: use this site's address on the link, or the interface's name", where, p.Local)
			}
			if a.Unmap().Is4() != ep.Addr().Unmap().Is4() {
				return pp, fmt.Errorf("%s.local: %v and the endpoint %v are of different address families: use a local address of the endpoint's family", where, a, ep.Addr())
			}
			pp.Local = a
		} else if validDevice(p.Local) {
			pp.LocalDevice = p.Local
		} else {
			return pp, fmt.Errorf("%s.local: %q is neither an address nor an interface name: use e.g. \"10.77.0.1\" or \"wwan0\"", where, p.Local)
		}
	}
	l, err := p.Link.validate(where + ".link")
	if err != nil {
		return pp, err
	}
	pp.Link = l
	pp.RTTUntold = p.Link.RTT == ""
	return pp, nil
}

// ValidPathName reports whether s may name a path: path names appear in
// logs, status, metric labels and the path state file.
func ValidPathName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// validDevice is what Linux takes as an interface name.
func validDevice(s string) bool {
	return s != "" && len(s) <= 15 && !strings.ContainsAny(s, "/ \t\n:") && s != "." && s != ".."
}

func (l *Link) validate(where string) (LinkConfig, error) {
	var lc LinkConfig
	var err error
	if lc.Up, err = rateKey(where+".up", l.Up); err != nil {
		return lc, err
	}
	if lc.Down, err = rateKey(where+".down", l.Down); err != nil {
		return lc, err
	}
	lc.RTT = DefaultRTT
	if l.RTT != "" {
		if lc.RTT, err = durationKey(where+".rtt", l.RTT, settings.MinRTT, settings.MaxRTT); err != nil {
			return lc, err
		}
	}
	lc.Congestion = l.Congestion
	if lc.Congestion == "" {
		lc.Congestion = CongestionModes[0]
	}
	if !contains(CongestionModes, lc.Congestion) {
		return lc, fmt.Errorf("%s.congestion: %q is not a controller: use one of %s", where, l.Congestion, strings.Join(CongestionModes, ", "))
	}
	if lc.Congestion == settings.CongestionRate && lc.Up == 0 {
		return lc, fmt.Errorf("%s.congestion: %q sends open loop at the configured rate, so %s.up must be set", where, lc.Congestion, where)
	}
	lc.Loss = l.Loss
	if lc.Loss == "" {
		lc.Loss = LossModes[0]
	}
	if !contains(LossModes, lc.Loss) {
		return lc, fmt.Errorf("%s.loss: %q is not a loss mode: use one of %s", where, l.Loss, strings.Join(LossModes, ", "))
	}
	if l.OutageAfter != "" {
		if lc.OutageAfter, err = durationKey(where+".outage_after", l.OutageAfter, settings.MinOutageAfter, settings.MaxOutageAfter); err != nil {
			return lc, err
		}
	}
	if l.ProbeInterval != "" {
		if lc.ProbeInterval, err = durationKey(where+".probe_interval", l.ProbeInterval, settings.MinProbeInterval, settings.MaxProbeInterval); err != nil {
			return lc, err
		}
	}
	if l.MaxOutage != "" {
		if lc.MaxOutage, err = durationKey(where+".max_outage", l.MaxOutage, settings.MinMaxOutage, settings.MaxMaxOutage); err != nil {
			return lc, err
		}
	}
	// The transport refuses a max_outage shorter than outage_after at start;
	// say so here, naming the keys, so a reload or a check refuses it too.
	if after, most := cmp.Or(lc.OutageAfter, settings.DefaultOutageAfter), cmp.Or(lc.MaxOutage, settings.DefaultMaxOutage); most < after {
		return lc, fmt.Errorf("%s.max_outage: %v is shorter than outage_after (%v): an outage is declared only after outage_after, so raise max_outage or lower outage_after", where, most, after)
	}
	if l.Window != "" {
		if lc.Window, err = sizeKey(where+".window", l.Window); err != nil {
			return lc, err
		}
		if lc.Window < settings.MinStreamWindow || lc.Window > settings.MaxStreamWindow {
			return lc, fmt.Errorf("%s.window: %q is out of range: use %s..%s, or leave it out (auto)", where, l.Window, FormatSize(settings.MinStreamWindow), FormatSize(settings.MaxStreamWindow))
		}
	}
	lc.MTU = l.MTU
	if lc.MTU == 0 {
		lc.MTU = DefaultPathMTU
	}
	if lc.MTU < MinPathMTU || lc.MTU > MaxPathMTU {
		return lc, fmt.Errorf("%s.mtu: %d is out of range: use %d..%d, the largest IP packet the path to the peer carries whole (1500 on Ethernet; check with ping -M do)", where, l.MTU, MinPathMTU, MaxPathMTU)
	}
	return lc, nil
}

func rateKey(key, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	r, err := ParseRate(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	if r > 0 && r < settings.MinRate {
		return 0, fmt.Errorf("%s: %q is below %s, the slowest link the transport paces: leave it out if the rate is unknown", key, s, FormatRate(settings.MinRate))
	}
	return r, nil
}

func durationKey(key, s string, lo, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration: use e.g. \"600ms\" or \"10s\"", key, s)
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("%s: %s is out of range: use %s..%s", key, d, lo, hi)
	}
	return d, nil
}

func sizeKey(key, s string) (int64, error) {
	n, err := ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return n, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Marshal encodes the file as TOML: Parse reads it back to what Validate
// makes of f. Keys left empty are left out.
func (f *File) Marshal() ([]byte, error) {
	out, err := toml.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("config: encoding: %w", err)
	}
	return out, nil
}

// WriteFile writes the file's TOML to path, readable by its owner only.
// It writes beside path and renames, so an endpoint reloading at that
// moment reads the old file or the new one, never half of one.
func (f *File) WriteFile(path string) error {
	out, err := f.Marshal()
	if err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Effective renders the validated configuration, defaults filled in, as the
// TOML a user could have written; `scpsvpn config check` prints it.
func (c *Config) Effective() ([]byte, error) {
	f := c.File()
	return f.Marshal()
}

// File is the validated configuration as the file that says it, every
// default written out: Validate of the result gives c again.
func (c *Config) File() File {
	f := File{Interface: Interface{
		Name:           c.Name,
		Listen:         c.Listen.String(),
		MTU:            c.MTU,
		PrivateKeyFile: c.PrivateKeyFile,
		LogLevel:       c.LogLevel,
		MaxFlows:       c.MaxFlows,
		Memory:         strconv.FormatInt(c.Memory, 10),
		StateDir:       c.StateDir,
	}}
	if c.Metrics.IsValid() {
		f.Interface.Metrics = c.Metrics.String()
	}
	for _, a := range c.Addresses {
		f.Interface.Address = append(f.Interface.Address, a.String())
	}
	for _, p := range c.Peers {
		fp := Peer{
			Name:      p.Name,
			PublicKey: base64.StdEncoding.EncodeToString(p.PublicKey[:]),
			Quic:      p.Quic,
			Link:      p.Link.file(),
		}
		if p.Endpoint.IsValid() && len(p.Paths) == 0 {
			fp.Endpoint = p.Endpoint.String()
		}
		for _, pp := range p.Paths {
			fpp := Path{Name: pp.Name, Local: pp.LocalDevice, Endpoint: pp.Endpoint.String(), Backup: pp.Backup, Link: pp.Link.file()}
			if pp.RTTUntold {
				fpp.Link.RTT = "" // written out, the guess would read as told
			}
			if pp.Local.IsValid() {
				fpp.Local = pp.Local.String()
			}
			fp.Paths = append(fp.Paths, fpp)
		}
		for _, s := range p.Subnets {
			fp.Subnets = append(fp.Subnets, s.String())
		}
		for _, port := range p.QuicPorts {
			fp.QuicPorts = append(fp.QuicPorts, int(port))
		}
		f.Peers = append(f.Peers, fp)
	}
	return f
}

// file is the link table that says l, every default written out.
func (l LinkConfig) file() Link {
	fl := Link{
		RTT:        l.RTT.String(),
		Congestion: l.Congestion,
		Loss:       l.Loss,
		MTU:        l.MTU,
	}
	if l.Up > 0 {
		fl.Up = FormatRate(l.Up)
	}
	if l.Down > 0 {
		fl.Down = FormatRate(l.Down)
	}
	if l.OutageAfter > 0 {
		fl.OutageAfter = l.OutageAfter.String()
	}
	if l.ProbeInterval > 0 {
		fl.ProbeInterval = l.ProbeInterval.String()
	}
	if l.MaxOutage > 0 {
		fl.MaxOutage = l.MaxOutage.String()
	}
	if l.Window > 0 {
		fl.Window = strconv.FormatInt(l.Window, 10)
	}
	return fl
}
