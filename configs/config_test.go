package configs

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const keyB = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="

const good = `
[interface]
name = "scps0"
listen = "0.0.0.0:4700"
private_key_file = "/etc/scpsvpn/private.key"
address = ["10.1.0.1/32"]
metrics = "127.0.0.1:9477"

[[peer]]
name = "site-b"
public_key = "` + keyB + `"
endpoint = "192.0.2.2:4700"
subnets = ["10.2.0.0/24", "fd00:2::/64"]

[peer.link]
up = "1.5Mbit"
down = "64kbit"
rtt = "600ms"
congestion = "vegas"
`

func TestParseGood(t *testing.T) {
	c, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.MTU != DefaultMTU || c.LogLevel != "info" || c.MaxFlows != DefaultMaxFlows || c.Memory != DefaultMemory() {
		t.Errorf("defaults not applied: %+v", c)
	}
	p := c.Peers[0]
	if p.Link.Up != 1_500_000 || p.Link.Down != 64_000 || p.Link.RTT != 600*time.Millisecond {
		t.Errorf("link = %+v", p.Link)
	}
	if p.Link.MTU != DefaultPathMTU {
		t.Errorf("link mtu = %d, want the default %d", p.Link.MTU, DefaultPathMTU)
	}
	if p.Link.Congestion != "vegas" || p.Link.Loss != "auto" {
		t.Errorf("modes = %q %q", p.Link.Congestion, p.Link.Loss)
	}
	if len(p.Subnets) != 2 || p.Subnets[1].String() != "fd00:2::/64" {
		t.Errorf("subnets = %v", p.Subnets)
	}
	if p.Quic != QuicModes[0] || !slices.Equal(p.QuicPorts, DefaultQuicPorts) {
		t.Errorf("quic = %q on %v, want the defaults", p.Quic, p.QuicPorts)
	}
	// The effective config parses back to the same thing.
	c2, out := effective(t, c)
	if c.Metrics.String() != "127.0.0.1:9477" {
		t.Errorf("metrics = %v", c.Metrics)
	}
	if c2.Peers[0].Quic != c.Peers[0].Quic || !slices.Equal(c2.Peers[0].QuicPorts, c.Peers[0].QuicPorts) {
		t.Errorf("round trip changed the QUIC policy:\n%s", out)
	}
	if c2.Peers[0].Link != c.Peers[0].Link || c2.Listen != c.Listen || c2.Metrics != c.Metrics || c2.Memory != c.Memory {
		t.Errorf("round trip changed the config:\n%s", out)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	cases := []parseErrorCase{
		{"unknown key", `listen =`, `listn =`, `unknown key "interface.listn"`},
		{"unknown link key", `rtt = "600ms"`, `rt = "600ms"`, `unknown key "peer.link.rt"`},
		{"bad rate", `"1.5Mbit"`, `"fast"`, `peer[0] (site-b).link.up: "fast" is not a rate`},
		{"rate below 1bit/s", `"64kbit"`, `"0.4bit"`, `peer[0] (site-b).link.down: "0.4bit" is below 1bit/s`},
		{"NaN window", `rtt = "600ms"`, `window = "NaN"`, `peer[0] (site-b).link.window: "NaN" is not a size`},
		{"small window", `rtt = "600ms"`, `window = "16KiB"`, `peer[0] (site-b).link.window: "16KiB" is out of range`},
		{"rate below the transport's", `"64kbit"`, `"4kbit"`, `peer[0] (site-b).link.down: "4kbit" is below 8kbit`},
		{"bad rtt", `"600ms"`, `"600"`, `peer[0] (site-b).link.rtt`},
		{"small path mtu", `rtt = "600ms"`, `mtu = 1000`, `peer[0] (site-b).link.mtu: 1000 is out of range: use 1280..9000`},
		{"path mtu not a number", `rtt = "600ms"`, `mtu = "1400"`, `peer.link.mtu`},
		{"bad congestion", `"vegas"`, `"bbr"`, `use one of hybrid, hybla, rate, vegas, vj`},
		{"bad key", keyB, "abc", `peer[0] (site-b).public_key`},
		{"bad subnet", `"10.2.0.0/24"`, `"10.2.0.1/24"`, `has host bits set: use 10.2.0.0/24`},
		{"bad listen", `"0.0.0.0:4700"`, `"nowhere"`, `interface.listen`},
		{"bad metrics", `"127.0.0.1:9477"`, `"localhost:9477"`, `interface.metrics: "localhost:9477" is not an address:port`},
		{"metrics without port", `"127.0.0.1:9477"`, `"127.0.0.1:0"`, `interface.metrics`},
		{"wrong type", `name = "scps0"`, `name = 3`, `interface.name`},
		{"address in a peer's subnet", `"10.2.0.0/24", "fd00`, `"10.0.0.0/8", "fd00`, `interface.address[0]: 10.1.0.1 lies in peer "site-b"'s subnet 10.0.0.0/8`},
		{"max_outage below outage_after", `rtt = "600ms"`, `rtt = "600ms"
outage_after = "20s"
max_outage = "10s"`, `peer[0] (site-b).link.max_outage: 10s is shorter than outage_after (20s)`},
		{"max_outage below the default outage_after", `rtt = "600ms"`, `rtt = "600ms"
max_outage = "2s"`, `peer[0] (site-b).link.max_outage: 2s is shorter than outage_after (3s)`},
		{"small memory", `name = "scps0"`, `name = "scps0"
memory = "16MiB"`, `interface.memory: "16MiB" is out of range: use 32MiB..1TiB`},
		{"bad memory", `name = "scps0"`, `name = "scps0"
memory = "lots"`, `interface.memory: "lots" is not a size`},
		{"bad quic policy", `subnets = [`, `quic = "block"
subnets = [`, `peer[0] (site-b).quic: "block" is not a QUIC policy: use one of fallback, repair, pass`},
		{"quic port out of range", `subnets = [`, `quic_ports = [443, 70000]
subnets = [`, `peer[0] (site-b).quic_ports[1]: 70000 is not a UDP port`},
		{"quic port twice", `subnets = [`, `quic_ports = [443, 443]
subnets = [`, `peer[0] (site-b).quic_ports[1]: 443 is listed twice`},
		{"no quic port", `subnets = [`, `quic_ports = []
subnets = [`, `peer[0] (site-b).quic_ports: empty`},
		{"quic port not a number", `subnets = [`, `quic_ports = ["443"]
subnets = [`, `peer.quic_ports`},
		{"relative state_dir", `name = "scps0"`, `name = "scps0"
state_dir = "var/lib/scpsvpn"`, `interface.state_dir: "var/lib/scpsvpn" is not an absolute path`},
		{"no key file", `private_key_file = "/etc/scpsvpn/private.key"`, ``, `interface.private_key_file: missing`},
	}
	checkParseErrors(t, good, cases)
}

// parseErrorCase edits a good file (from -> to) and names what the
// error must say.
type parseErrorCase struct {
	name, from, to, want string
}

// checkParseErrors: each case's file is refused with a one-line error
// that says want.
func checkParseErrors(t *testing.T, base string, cases []parseErrorCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(base, tc.from, tc.to, 1)
			if src == base {
				t.Fatalf("replacement %q not found", tc.from)
			}
			_, err := Parse([]byte(src))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func TestQuicKeys(t *testing.T) {
	src := strings.Replace(good, "subnets = [", `quic = "repair"
quic_ports = [443, 8443]
subnets = [`, 1)
	c, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Peers[0]
	if p.Quic != "repair" || !slices.Equal(p.QuicPorts, []uint16{443, 8443}) {
		t.Errorf("quic = %q on %v", p.Quic, p.QuicPorts)
	}
	c2, out := effective(t, c)
	if p2 := c2.Peers[0]; p2.Quic != p.Quic || !slices.Equal(p2.QuicPorts, p.QuicPorts) {
		t.Errorf("round trip changed the QUIC policy:\n%s", out)
	}
}

// effective renders c's effective configuration and parses it back.
func effective(t *testing.T, c *Config) (*Config, []byte) {
	t.Helper()
	out, err := c.Effective()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse(out)
	if err != nil {
		t.Fatalf("effective config does not parse: %v\n%s", err, out)
	}
	return c2, out
}

func TestDuplicateSubnetRejected(t *testing.T) {
	src := good + `
[[peer]]
name = "site-c"
public_key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
subnets = ["10.2.0.0/24"]
`
	_, err := Parse([]byte(src))
	if err == nil || !strings.Contains(err.Error(), `already owned by peer "site-b"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if err == nil || !strings.Contains(err.Error(), "nope.toml") {
		t.Fatalf("err = %v", err)
	}
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatal(err)
	}
}

func TestPathMTU(t *testing.T) {
	c, err := Parse([]byte(strings.Replace(good, `rtt = "600ms"`, "rtt = \"600ms\"\nmtu = 1400", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Peers[0].Link.MTU; got != 1400 {
		t.Fatalf("link mtu = %d, want 1400", got)
	}
	out, err := c.Effective()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse(out)
	if err != nil || c2.Peers[0].Link.MTU != 1400 {
		t.Fatalf("effective config lost the mtu (%v):\n%s", err, out)
	}
}

// TestMemory: [interface] memory takes a size; without it the budget is
// derived from the machine, within its bounds.
func TestMemory(t *testing.T) {
	c, err := Parse([]byte(strings.Replace(good, `name = "scps0"`, `name = "scps0"
memory = "256MiB"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Memory != 256<<20 {
		t.Errorf("memory = %d, want %d", c.Memory, 256<<20)
	}
	d := DefaultMemory()
	if d < MinDefaultMemory || d > MaxDefaultMemory {
		t.Errorf("default memory %d outside %d..%d", d, MinDefaultMemory, MaxDefaultMemory)
	}
	if m := machineMemory(); m != fallbackMachineMemory && m >= 4*MinDefaultMemory && m <= 4*MaxDefaultMemory && d != m/4 {
		t.Errorf("default memory %d is not a quarter of the machine's %d", d, m)
	}
}

// TestMemoryHoldsPeers: the budget must give every peer what it needs
// (PeerMemoryMin beside the netstack's quarter): a memory key too small
// for the peers is refused, naming the key and the least that holds them;
// without the key the default grows to fit them.
func TestMemoryHoldsPeers(t *testing.T) {
	withPeers := func(n int, memory string) *File {
		f := &File{Interface: Interface{Name: "scps0", PrivateKeyFile: "/k", Memory: memory}}
		for i := range n {
			var k [32]byte
			k[0], k[1] = byte(i), byte(i>>8)
			k[31] = 1
			f.Peers = append(f.Peers, Peer{Name: fmt.Sprintf("p%d", i), PublicKey: base64.StdEncoding.EncodeToString(k[:]),
				Subnets: []string{fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)}})
		}
		return f
	}
	for _, n := range []int{1, 2, 10, 100} {
		least := MemoryFor(n)
		if PeerMemory(least, n) < PeerMemoryMin || PeerMemory(least-1<<20, n) >= PeerMemoryMin && least > MinMemory {
			t.Errorf("MemoryFor(%d) = %s is not the least budget in MiB that holds them", n, FormatSize(least))
		}
		c, err := withPeers(n, "").Validate()
		if err != nil {
			t.Fatalf("%d peers, no memory key: %v", n, err)
		}
		if c.Memory != max(DefaultMemory(), least) {
			t.Errorf("%d peers, no memory key: budget %d, want %d", n, c.Memory, max(DefaultMemory(), least))
		}
		if _, err := withPeers(n, FormatSize(max(least, MinMemory))).Validate(); err != nil {
			t.Errorf("%d peers, memory %s: %v", n, FormatSize(least), err)
		}
	}
	_, err := withPeers(3, "32MiB").Validate()
	want := `interface.memory: "32MiB" cannot hold 3 peers: each needs 10.25 MiB beside the netstack's quarter; use at least "41MiB", or leave it out`
	if err == nil || err.Error() != want {
		t.Errorf("3 peers in 32 MiB: %v\nwant %s", err, want)
	}
}
