package configs

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// everyKey is a file that sets every key of every table, two peers, one
// of them with no link table.
func everyKey(dir string) File {
	return File{
		Interface: Interface{
			Name:           "scps0",
			Listen:         "[::]:4701",
			MTU:            1380,
			PrivateKeyFile: filepath.Join(dir, "private.key"),
			Address:        []string{"10.1.0.1/32", "fd00:1::1/128"},
			LogLevel:       "debug",
			MaxFlows:       1000,
			Memory:         "256MiB",
			Metrics:        "127.0.0.1:9477",
			StateDir:       filepath.Join(dir, "state"),
		},
		Peers: []Peer{{
			Name:      "site-b",
			PublicKey: keyB,
			Endpoint:  "192.0.2.2:4700",
			Subnets:   []string{"10.2.0.0/24", "fd00:2::/64"},
			Quic:      "repair",
			QuicPorts: []int{443, 8443},
			Link: Link{
				Up:            "1.5Mbit",
				Down:          "64kbit",
				RTT:           "650ms",
				Congestion:    "vegas",
				Loss:          "corruption",
				OutageAfter:   "5s",
				ProbeInterval: "500ms",
				MaxOutage:     "1h",
				Window:        "4MiB",
				MTU:           1400,
			},
		}, {
			Name:      "site-c",
			PublicKey: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
			Subnets:   []string{"10.3.0.0/24"},
			Paths: []Path{{
				Name:     "lte",
				Local:    "10.78.0.1",
				Endpoint: "10.78.0.2:4700",
				Backup:   true,
				Link: Link{
					Up:            "5Mbit",
					Down:          "20Mbit",
					RTT:           "60ms",
					Congestion:    "vj",
					Loss:          "congestion",
					OutageAfter:   "2s",
					ProbeInterval: "200ms",
					MaxOutage:     "10m",
					Window:        "2MiB",
					MTU:           1420,
				},
			}, {
				Name:     "geo",
				Local:    "wan0",
				Endpoint: "10.77.0.2:4700",
			}},
		}},
	}
}

// zeroFields names the fields of v (a struct, through nested structs) left
// at their zero value.
func zeroFields(v reflect.Value, path string) []string {
	var zero []string
	for i := range v.NumField() {
		f, name := v.Field(i), path+v.Type().Field(i).Name
		switch {
		case f.Kind() == reflect.Struct:
			zero = append(zero, zeroFields(f, name+".")...)
		case f.IsZero():
			zero = append(zero, name)
		}
	}
	return zero
}

// TestMarshalRoundTrip: a file written by Marshal decodes to the same file
// and parses to what Validate makes of it, for every key (a key added to
// the file's structs must be added to everyKey).
func TestMarshalRoundTrip(t *testing.T) {
	f := everyKey(t.TempDir())
	// The first peer sets every key but paths (a peer with paths names
	// no endpoint of its own); the second peer's first path sets every
	// path key.
	zero := zeroFields(reflect.ValueOf(f.Interface), "Interface.")
	zero = append(zero, slices.DeleteFunc(zeroFields(reflect.ValueOf(f.Peers[0]), "Peer."), func(s string) bool { return s == "Peer.Paths" })...)
	zero = append(zero, zeroFields(reflect.ValueOf(f.Peers[1].Paths[0]), "Path.")...)
	if len(zero) != 0 {
		t.Fatalf("everyKey leaves %v unset: give each a value other than its default", zero)
	}
	want, err := f.Validate()
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var back File
	dec := toml.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil || !reflect.DeepEqual(back, f) {
		t.Errorf("decoded back (%v):\n%+v\nwant\n%+v\nfrom:\n%s", err, back, f, out)
	}
	got, err := Parse(out)
	if err != nil {
		t.Fatalf("written file does not parse: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed %+v\nwant %+v\nfrom:\n%s", got, want, out)
	}
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := f.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("written file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if loaded, err := Load(path); err != nil || !reflect.DeepEqual(loaded, want) {
		t.Errorf("loaded %+v, %v; want %+v", loaded, err, want)
	}
	if left, _ := filepath.Glob(path + ".*"); len(left) != 0 {
		t.Errorf("WriteFile left %v", left)
	}
}

// TestFileOfConfig: the file a validated config gives, every default
// written out, validates to that config.
func TestFileOfConfig(t *testing.T) {
	for name, f := range map[string]File{"every key": everyKey(t.TempDir()), "defaults": {
		Interface: Interface{Name: "scps0", PrivateKeyFile: "/k"},
		Peers:     []Peer{{Name: "b", PublicKey: keyB, Subnets: []string{"10.2.0.0/24"}}},
	}} {
		c, err := f.Validate()
		if err != nil {
			t.Fatal(err)
		}
		g := c.File()
		back, err := g.Validate()
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Errorf("%s: %+v, %v; want %+v", name, back, err, c)
		}
	}
}
