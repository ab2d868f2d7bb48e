package configs

import (
	"net/netip"
	"strings"
	"testing"
)

// twoPaths is the example of a site with a GEO link and an LTE
// backup, as a user writes it.
const twoPaths = `
[interface]
name = "scps0"
private_key_file = "/etc/scpsvpn/private.key"

[[peer]]
name = "site-b"
public_key = "` + keyB + `"
subnets = ["10.2.0.0/24"]

[[peer.path]]
name = "geo"
local = "10.77.0.1"          # source address to send from (or an interface name)
endpoint = "10.77.0.2:4700"
[peer.path.link]             # optional, as [peer.link] today
up = "2Mbit"

[[peer.path]]
name = "lte"
local = "wwan0"
endpoint = "10.78.0.2:4700"
backup = true                # carries data only while no primary path works
`

func TestPathsParse(t *testing.T) {
	c, err := Parse([]byte(twoPaths))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Peers[0]
	if len(p.Paths) != 2 {
		t.Fatalf("paths = %+v", p.Paths)
	}
	geo, lte := p.Paths[0], p.Paths[1]
	if geo.Name != "geo" || geo.Local != netip.MustParseAddr("10.77.0.1") || geo.LocalDevice != "" || geo.Backup || geo.Link.Up != 2_000_000 {
		t.Errorf("geo = %+v", geo)
	}
	if lte.Name != "lte" || lte.Local.IsValid() || lte.LocalDevice != "wwan0" || !lte.Backup || lte.Link.MTU != DefaultPathMTU {
		t.Errorf("lte = %+v", lte)
	}
	// Neither path tells its RTT: each link's guess is DefaultRTT.
	if !geo.RTTUntold || !lte.RTTUntold || geo.Link.RTT != DefaultRTT {
		t.Errorf("geo %+v, lte %+v: want their RTTs untold, DefaultRTT", geo, lte)
	}
	if told, err := Parse([]byte(strings.Replace(twoPaths, `up = "2Mbit"`, "up = \"2Mbit\"\nrtt = \"600ms\"", 1))); err != nil || told.Peers[0].Paths[0].RTTUntold {
		t.Errorf("geo with rtt = \"600ms\": %+v, %v: want its RTT told", told.Peers[0].Paths[0], err)
	}
	// Handshakes start on the first primary path.
	if p.Endpoint != geo.Endpoint {
		t.Errorf("peer endpoint %v, want the first primary path's %v", p.Endpoint, geo.Endpoint)
	}
	// The effective config writes the paths back, and no peer endpoint.
	c2, out := effective(t, c)
	if len(c2.Peers[0].Paths) != 2 || c2.Peers[0].Paths[0] != geo || c2.Peers[0].Paths[1] != lte || strings.Contains(string(out), "\nendpoint = \"10.77.0.2:4700\"\nsubnets") {
		t.Errorf("round trip changed the paths:\n%s", out)
	}
}

// TestPathsBackupFirst: the peer's endpoint is the first primary path's
// even when a backup is listed before it.
func TestPathsBackupFirst(t *testing.T) {
	i := strings.Index(twoPaths, "[[peer.path]]")
	j := strings.LastIndex(twoPaths, "[[peer.path]]")
	src := twoPaths[:i] + twoPaths[j:] + "\n" + twoPaths[i:j]
	c, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Peers[0]; p.Paths[0].Name != "lte" || p.Endpoint != netip.MustParseAddrPort("10.77.0.2:4700") {
		t.Errorf("paths %+v, endpoint %v: want geo's endpoint", p.Paths, p.Endpoint)
	}
}

func TestPathErrorsNameTheKey(t *testing.T) {
	cases := []parseErrorCase{
		{"endpoint beside paths", `subnets = ["10.2.0.0/24"]`, `subnets = ["10.2.0.0/24"]
endpoint = "192.0.2.2:4700"`, `peer[0] (site-b).endpoint: set beside [[peer.path]] tables`},
		{"name twice", `name = "lte"`, `name = "geo"`, `peer[0] (site-b).path[1].name: "geo" is used twice`},
		{"bad name", `name = "lte"`, `name = "lte 2"`, `peer[0] (site-b).path[1].name: "lte 2" is not a path name`},
		{"no name", `name = "lte"`, ``, `peer[0] (site-b).path[1].name: "" is not a path name`},
		{"no endpoint", `endpoint = "10.78.0.2:4700"`, ``, `peer[0] (site-b).path[1] (lte).endpoint: missing`},
		{"bad endpoint", `"10.78.0.2:4700"`, `"10.78.0.2"`, `peer[0] (site-b).path[1] (lte).endpoint: "10.78.0.2" is not an address:port`},
		{"bad local", `"wwan0"`, `"not a device"`, `peer[0] (site-b).path[1] (lte).local: "not a device" is neither an address nor an interface name`},
		{"unspecified local", `"wwan0"`, `"0.0.0.0"`, `peer[0] (site-b).path[1] (lte).local: "0.0.0.0" cannot be a source address`},
		{"local of another family", `"wwan0"`, `"fd00::1"`, `peer[0] (site-b).path[1] (lte).local: fd00::1 and the endpoint 10.78.0.2 are of different address families`},
		{"same path twice", `local = "wwan0"
endpoint = "10.78.0.2:4700"`, `local = "10.77.0.1"
endpoint = "10.77.0.2:4700"`, `peer[0] (site-b).path[1] (lte).endpoint: path "geo" already goes from the same local to 10.77.0.2:4700`},
		{"every path backup", `endpoint = "10.77.0.2:4700"`, `endpoint = "10.77.0.2:4700"
backup = true`, `peer[0] (site-b).path: every path is a backup`},
		{"bad path link", `up = "2Mbit"`, `up = "fast"`, `peer[0] (site-b).path[0] (geo).link.up: "fast" is not a rate`},
		{"unknown path key", `backup = true `, `spare = true `, `unknown key "peer.path.spare"`},
		{"backup not a bool", `backup = true `, `backup = "yes" `, `peer.path.backup`},
	}
	checkParseErrors(t, twoPaths, cases)
}

func TestTooManyPaths(t *testing.T) {
	src := twoPaths
	for i := range MaxPaths {
		src += "\n[[peer.path]]\nname = \"x" + string(rune('a'+i)) + "\"\nendpoint = \"10.9.0." + string(rune('1'+i)) + ":4700\"\n"
	}
	_, err := Parse([]byte(src))
	if err == nil || !strings.Contains(err.Error(), "peer[0] (site-b).path: 10 paths: use at most 8") {
		t.Errorf("err = %v", err)
	}
}
