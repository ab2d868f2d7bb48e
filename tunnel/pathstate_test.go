package tunnel

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"scpsvpn/peers"
	"scpsvpn/scps/cc"
)

// TestPathStateSavedAndLoaded: what an association learned of its peer's
// path is written to state_dir when the endpoint stops, read back when it
// starts again, and the next association to that peer resumes from it.
func TestPathStateSavedAndLoaded(t *testing.T) {
	h, a, b := twoSites(t)
	b.echo(7)
	c := openEcho(t, a, "10.2.0.5:7")
	if err := echoCheck(c, 1<<20); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(b.stateDir, b.ep.cfg.Name+pathFileSuffix)
	if b.ep.paths.file != file {
		t.Fatalf("state file %q, want %q (state_dir, then the interface's name)", b.ep.paths.file, file)
	}
	b.stop()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no state file after the stop: %v", err)
	}
	m, err := parsePathState(raw)
	if err != nil {
		t.Fatalf("state file does not parse: %v\n%s", err, raw)
	}
	keyA := [32]byte(a.priv.PublicKey())
	saved, ok := m[keyA]
	if !ok || saved.Rate <= 0 || saved.MinRTT <= 0 || time.Since(saved.At) > time.Minute {
		t.Fatalf("state file holds %+v for a (found %v), want a rate, an RTT and a fresh time:\n%s", saved, ok, raw)
	}
	h.wire.SetFilter(nil)
	b.start(b.peer(a))
	if got, ok := b.ep.paths.get(keyA, time.Now()); !ok || got.Rate != float64(uint64(saved.Rate)) {
		t.Fatalf("after the restart b holds %+v (%v), the file said %+v", got, ok, saved)
	}
	b.waitLog("resuming at the path saved", nil)
	openEcho(t, a, "10.2.0.5:7")
}

// TestPathStateNoDir: a state_dir that does not exist costs the
// persistence, not the start.
func TestPathStateNoDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	var logs bytes.Buffer
	s := openPathStore(dir, "scps0", slog.New(slog.NewTextHandler(&logs, nil)))
	if s.file != "" || !bytes.Contains(logs.Bytes(), []byte("not kept across restarts")) {
		t.Fatalf("file %q, logs %q", s.file, logs.String())
	}
	var k [32]byte
	s.put(k, cc.PathState{Rate: 1e6, MinRTT: time.Second, At: time.Now()})
	s.save()
	if _, ok := s.get(k, time.Now()); !ok {
		t.Fatal("kept in memory: want the entry")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("state_dir created: %v", err)
	}
}

// TestPathStateKeepsBetterRate: an association that carried little does
// not replace a fresh, higher saved rate on the same path; one that
// retreated from it does.
func TestPathStateKeepsBetterRate(t *testing.T) {
	s := openPathStore("", "scps0", slog.New(slog.DiscardHandler))
	var k [32]byte
	now := time.Now()
	s.put(k, cc.PathState{Rate: 1e6, MinRTT: 600 * time.Millisecond, At: now})
	s.put(k, cc.PathState{Rate: 1e4, MinRTT: 610 * time.Millisecond, At: now.Add(time.Second)})
	if p, _ := s.get(k, now); p.Rate != 1e6 || !p.At.Equal(now.Add(time.Second)) {
		t.Fatalf("after a smaller sample: %+v, want the rate kept and its time refreshed", p)
	}
	s.put(k, cc.PathState{Rate: 2e5, MinRTT: 600 * time.Millisecond, At: now, Retreated: true})
	if p, _ := s.get(k, now); p.Rate != 2e5 {
		t.Fatalf("after a retreat: %+v, want the new rate", p)
	}
}

// TestPathStateFileRoundTrip: marshal then parse gives the entries back
// (rates in whole bytes/s, RTTs in microseconds, times in seconds).
func TestPathStateFileRoundTrip(t *testing.T) {
	k1, _ := peers.GeneratePrivateKey()
	k2, _ := peers.GeneratePrivateKey()
	at := time.Unix(1_700_000_000, 0)
	m := map[[32]byte]cc.PathState{
		[32]byte(k1.PublicKey()): {Rate: 1_250_000, MinRTT: 601 * time.Millisecond, Loss: 0.01, At: at},
		[32]byte(k2.PublicKey()): {Rate: 8000, MinRTT: 40 * time.Millisecond, At: at},
	}
	got, err := parsePathState(marshalPathState(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(m) {
		t.Fatalf("%d entries, want %d", len(got), len(m))
	}
	for k, want := range m {
		if p := got[k]; p.Rate != want.Rate || p.MinRTT != want.MinRTT || p.Loss != want.Loss || !p.At.Equal(want.At) {
			t.Errorf("entry %+v, want %+v", p, want)
		}
	}
	for _, bad := range []string{
		"",
		"scpsvpn-paths 2\n",
		pathFileHeader,
		pathFileHeader + "\nAAAA 1 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " -1 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 01 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 0 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 1000001 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0 0\n" + lineFor(k1) + " 1 1 0 0\n",
		pathFileHeader + "\n" + lineFor(k1) + " 1 1 0 0",
	} {
		if _, err := parsePathState([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func lineFor(k peers.Key) string { return k.PublicKey().String() }

// FuzzParsePathState: any bytes in the state file are refused with an
// error or parse to entries that write back and parse to the same.
func FuzzParsePathState(f *testing.F) {
	k, _ := peers.GeneratePrivateKey()
	f.Add([]byte(pathFileHeader + "\n" + lineFor(k) + " 1250000 601000 10000 1700000000\n"))
	f.Add([]byte(pathFileHeader + "\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parsePathState(b)
		if err != nil {
			return
		}
		again, err := parsePathState(marshalPathState(m))
		if err != nil {
			t.Fatalf("written back, does not parse: %v", err)
		}
		if len(again) != len(m) {
			t.Fatalf("%d entries, then %d", len(m), len(again))
		}
		for key, p := range m {
			if q := again[key]; q != p {
				t.Fatalf("entry %+v became %+v", p, q)
			}
		}
	})
}
