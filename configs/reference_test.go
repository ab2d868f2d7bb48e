package configs

import (
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"

	"scpsvpn/scps/settings"
)

// referenceTables reads the README's config reference: for each table
// heading (`[interface]`, `[[peer]]`, `[peer.link]`), its rows as key ->
// [default, meaning].
func referenceTables(t *testing.T) map[string]map[string][2]string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, ok := strings.Cut(string(b), "\n## Config reference\n")
	if !ok {
		t.Fatal("README.md has no \"## Config reference\" section")
	}
	if i := strings.Index(ref, "\n## "); i >= 0 {
		ref = ref[:i]
	}
	heading := regexp.MustCompile("^`(\\[\\[?[a-z.]+\\]\\]?)`")
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| (.*?) \\| (.*) \\|$")
	// A table may say it takes another's keys, as a path's link does.
	sameAs := regexp.MustCompile("the keys of `(\\[[a-z.]+\\])`")
	aliases := map[string]string{}
	tables := map[string]map[string][2]string{}
	var table string
	for _, line := range strings.Split(ref, "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			table = m[1]
			tables[table] = map[string][2]string{}
			if a := sameAs.FindStringSubmatch(line); a != nil {
				aliases[table] = a[1]
			}
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil {
			if table == "" {
				t.Fatalf("config reference row before any table heading: %q", line)
			}
			tables[table][m[1]] = [2]string{m[2], m[3]}
		}
	}
	for table, of := range aliases {
		if len(tables[table]) > 0 || tables[of] == nil {
			t.Fatalf("config reference: %s says it takes the keys of %s, but has rows of its own or %s has none", table, of, of)
		}
		tables[table] = tables[of]
	}
	return tables
}

// fileTables lists the tables of the file, as the README heads them
// (`[interface]`, `[[peer]]`, `[peer.link]`, ...), each with its keys.
func fileTables() map[string][]string {
	out := map[string][]string{}
	var walk func(name string, array bool, rt reflect.Type)
	walk = func(name string, array bool, rt reflect.Type) {
		heading := "[" + name + "]"
		if array {
			heading = "[" + heading + "]"
		}
		keys := []string{}
		for i := range rt.NumField() {
			f := rt.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(name+"."+key, false, f.Type)
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				walk(name+"."+key, true, f.Type.Elem())
			default:
				keys = append(keys, key)
			}
		}
		slices.Sort(keys)
		out[heading] = keys
	}
	walk("interface", false, reflect.TypeFor[Interface]())
	walk("peer", true, reflect.TypeFor[Peer]())
	return out
}

// TestReferenceNamesEveryKey: the README's config reference has a row for
// every key the file accepts, in the right table, and none other, and
// each default it writes as a value is the one the parser applies.
func TestReferenceNamesEveryKey(t *testing.T) {
	tables := referenceTables(t)
	want := fileTables()
	if got, keys := slices.Sorted(maps.Keys(tables)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, keys) {
		t.Errorf("README's config reference has tables %v; the file has %v", got, keys)
	}
	for table, keys := range want {
		got := slices.Sorted(maps.Keys(tables[table]))
		if !slices.Equal(got, keys) {
			t.Errorf("README's %s table lists %v; the file accepts %v", table, got, keys)
		}
	}

	// The defaults the parser fills in, as Effective writes them.
	c, err := Parse([]byte(`[interface]
name = "scps0"
private_key_file = "/k"
[[peer]]
name = "b"
public_key = "` + keyB + `"
subnets = ["10.2.0.0/24"]
`))
	if err != nil {
		t.Fatal(err)
	}
	eff, err := c.Effective()
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Interface map[string]any
		Peer      []map[string]any
	}
	if err := toml.Unmarshal(eff, &m); err != nil {
		t.Fatal(err)
	}
	link, _ := m.Peer[0]["link"].(map[string]any)
	delete(m.Peer[0], "link")
	applied := map[string]map[string]any{"[interface]": m.Interface, "[[peer]]": m.Peer[0], "[peer.link]": link}
	// The link's timers are left to the transport, which fills them in
	// from settings.
	applied["[peer.link]"]["outage_after"] = settings.DefaultOutageAfter
	applied["[peer.link]"]["probe_interval"] = settings.DefaultProbeInterval
	applied["[peer.link]"]["max_outage"] = settings.DefaultMaxOutage

	literal := regexp.MustCompile("^`([^`]+)`$")
	checked := 0
	for table, rows := range tables {
		for key, cells := range rows {
			lit := literal.FindStringSubmatch(cells[0])
			if lit == nil {
				continue // "(required)", "none", "auto", prose
			}
			if applied[table] == nil {
				continue // a table that takes another's keys: checked there
			}
			got, ok := applied[table][key]
			if !ok {
				t.Errorf("%s %s: README gives default %s, but the parser fills in none", table, key, cells[0])
				continue
			}
			var gotText string
			switch g := got.(type) {
			case time.Duration:
				d, err := time.ParseDuration(lit[1])
				if err != nil || d != g {
					t.Errorf("%s %s: README's default %s, the transport's %v", table, key, cells[0], g)
				}
				checked++
				continue
			case []any:
				var parts []string
				for _, x := range g {
					parts = append(parts, strings.Trim(strings.TrimSpace(toString(x)), "'"))
				}
				gotText = "[" + strings.Join(parts, ", ") + "]"
			default:
				gotText = toString(g)
			}
			if gotText != lit[1] {
				t.Errorf("%s %s: README's default is %s, the parser's %s", table, key, cells[0], gotText)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Errorf("only %d defaults checked: the reference's default column no longer reads as expected", checked)
	}
}

// TestReferenceBounds: the bounds the reference states are the ones the
// parser and the transport enforce.
func TestReferenceBounds(t *testing.T) {
	tables := referenceTables(t)
	for _, c := range []struct{ table, key, says string }{
		{"[interface]", "mtu", "1280..9000"},
		{"[interface]", "memory", "at least `32MiB`"},
		{"[peer.link]", "up", "at least `8kbit`"},
		{"[peer.link]", "down", "at least `8kbit`"},
		{"[peer.link]", "window", "`64KiB`..`1GiB`"},
		{"[peer.link]", "mtu", "1280..9000"},
	} {
		if !strings.Contains(tables[c.table][c.key][1], c.says) {
			t.Errorf("%s %s: README no longer says %q; check its bound against the code and update this test", c.table, c.key, c.says)
		}
	}
	if MinPathMTU != 1280 || MaxPathMTU != 9000 {
		t.Errorf("path MTU bounds are %d..%d, README says 1280..9000", MinPathMTU, MaxPathMTU)
	}
	if _, err := Parse([]byte(strings.Replace(good, "[interface]", "[interface]\nmtu = 1279", 1))); err == nil {
		t.Error("interface mtu 1279 accepted; README says 1280..9000")
	}
	if _, err := Parse([]byte(strings.Replace(good, "[interface]", "[interface]\nmtu = 9001", 1))); err == nil {
		t.Error("interface mtu 9001 accepted; README says 1280..9000")
	}
	if MinMemory != 32<<20 {
		t.Errorf("MinMemory is %d, README says 32MiB", MinMemory)
	}
	if r, _ := ParseRate("8kbit"); r != settings.MinRate {
		t.Errorf("8kbit is %d bit/s, the transport's floor %d", r, settings.MinRate)
	}
	lo, _ := ParseSize("64KiB")
	hi, _ := ParseSize("1GiB")
	if lo != settings.MinStreamWindow || hi != settings.MaxStreamWindow {
		t.Errorf("README's window bounds are %d..%d, the transport's %d..%d", lo, hi, settings.MinStreamWindow, settings.MaxStreamWindow)
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	default:
		b, _ := toml.Marshal(map[string]any{"v": x})
		_, s, _ := strings.Cut(strings.TrimSpace(string(b)), "= ")
		return s
	}
}
